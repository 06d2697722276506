// Package cronschedule reads a backup schedule as a CronJob's (five fields or a descriptor such
// as @daily, in UTC) and answers the two questions the operator asks of it: which scheduled time
// is the latest one due, and how long the gap is around now.
package cronschedule

import (
	"errors"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser reads five fields, or @yearly, @monthly, @weekly, @daily, @hourly (and their synonyms).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads a schedule. Its times are in UTC, whatever the operator's time zone.
func Parse(spec string) (cron.Schedule, error) {
	spec = strings.TrimSpace(spec)
	if strings.HasPrefix(spec, "@every") || strings.Contains(spec, "TZ=") {
		// Accepted by the library, not by a CronJob: one syntax, the one users know.
		return nil, errors.New("want five fields or @yearly, @monthly, @weekly, @daily, @hourly")
	}
	return parser.Parse("CRON_TZ=UTC " + spec)
}

// lookBacks are the windows searched, shortest first, for the latest scheduled time before a
// moment: the first that holds one bounds the walk to it, whatever the schedule. robfig/cron
// gives up on a schedule with no time in five years, as this does.
var lookBacks = []time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 5 * 367 * 24 * time.Hour}

// Latest is the latest time of the schedule after since and at or before now, and false when
// there is none. Of the times an operator that was down missed, only the latest is made.
func Latest(s cron.Schedule, since, now time.Time) (time.Time, bool) {
	for _, back := range lookBacks {
		from := now.Add(-back)
		if from.Before(since) {
			from = since
		}
		t := s.Next(from)
		if t.IsZero() || t.After(now) {
			if !from.After(since) {
				return time.Time{}, false // searched all the way back to since
			}
			continue
		}
		for next := s.Next(t); !next.IsZero() && !next.After(now); next = s.Next(next) {
			t = next
		}
		return t, true
	}
	return time.Time{}, false
}

// Period is the gap between the schedule's latest time at or before now and its next one: what
// "a backup a period" means at this moment of a schedule whose gaps differ (weekdays only, say).
func Period(s cron.Schedule, now time.Time) time.Duration {
	next := s.Next(now)
	if prev, ok := Latest(s, time.Time{}, now); ok && !next.IsZero() {
		return next.Sub(prev)
	}
	if after := s.Next(next); !next.IsZero() && !after.IsZero() {
		return after.Sub(next)
	}
	return 0
}
