package cronschedule

import (
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseTakesWhatACronJobTakes(t *testing.T) {
	for _, spec := range []string{"*/5 * * * *", "0 3 * * *", "0 9 * * MON-FRI", "@daily", "@hourly", " 0 0 1 * * "} {
		if _, err := Parse(spec); err != nil {
			t.Errorf("%q: %v", spec, err)
		}
	}
	for _, spec := range []string{"", "* * * *", "0 0 * * * *", "61 * * * *", "@every 10s", "CRON_TZ=Europe/Paris 0 3 * * *", "@fortnightly"} {
		if _, err := Parse(spec); err == nil {
			t.Errorf("%q: parsed, want an error", spec)
		}
	}
}

// Times are UTC whatever the process's zone.
func TestParseReadsUTC(t *testing.T) {
	old := time.Local
	time.Local = time.FixedZone("UTC+5", 5*3600)
	t.Cleanup(func() { time.Local = old })
	s, err := Parse("0 3 * * *")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Next(at("2026-12-02T00:00:00Z")), at("2026-12-02T03:00:00Z"); !got.Equal(want) {
		t.Errorf("next: %v, want %v", got, want)
	}
}

func TestLatestIsTheLastTimeDue(t *testing.T) {
	for _, c := range []struct {
		spec, since, now, want string // want "": none
	}{
		{"* * * * *", "2026-12-02T10:00:00Z", "2026-12-02T10:00:59Z", ""},
		{"* * * * *", "2026-12-02T10:00:00Z", "2026-12-02T10:01:00Z", "2026-12-02T10:01:00Z"},
		{"* * * * *", "2026-01-01T00:00:00Z", "2026-12-02T10:07:30Z", "2026-12-02T10:07:00Z"}, // down for most of a year: one
		{"0 3 * * *", "2026-11-20T00:00:00Z", "2026-12-02T02:59:00Z", "2026-12-01T03:00:00Z"},
		{"0 3 * * *", "2026-12-01T03:00:00Z", "2026-12-02T02:59:00Z", ""},
		{"0 0 1 1 *", "2020-01-01T00:00:00Z", "2026-12-02T10:00:00Z", "2026-01-01T00:00:00Z"},
		{"0 0 29 2 *", "2021-01-01T00:00:00Z", "2026-12-02T10:00:00Z", "2024-02-29T00:00:00Z"},
		{"0 0 29 2 *", "2025-01-01T00:00:00Z", "2026-12-02T10:00:00Z", ""},
	} {
		s, err := Parse(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := Latest(s, at(c.since), at(c.now))
		switch {
		case c.want == "" && ok:
			t.Errorf("%s since %s at %s: %v, want none", c.spec, c.since, c.now, got)
		case c.want != "" && (!ok || !got.Equal(at(c.want))):
			t.Errorf("%s since %s at %s: %v (%v), want %s", c.spec, c.since, c.now, got, ok, c.want)
		}
	}
}

func TestPeriodIsTheGapAroundNow(t *testing.T) {
	for _, c := range []struct {
		spec, now string
		want      time.Duration
	}{
		{"*/15 * * * *", "2026-12-02T10:07:00Z", 15 * time.Minute},
		{"@daily", "2026-12-02T10:07:00Z", 24 * time.Hour},
		// Weekdays at 9: over a weekend the gap is three days, so "two periods" is not a Sunday alarm.
		{"0 9 * * MON-FRI", "2026-12-06T12:00:00Z", 72 * time.Hour}, // a Sunday
		{"0 9 * * MON-FRI", "2026-12-08T12:00:00Z", 24 * time.Hour}, // a Tuesday
	} {
		s, err := Parse(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := Period(s, at(c.now)); got != c.want {
			t.Errorf("%s at %s: %v, want %v", c.spec, c.now, got, c.want)
		}
	}
}
