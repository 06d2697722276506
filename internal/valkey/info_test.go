package valkey

import "testing"

// A backup loads into its own version or a later one only.
func TestOlderVersion(t *testing.T) {
	for _, c := range []struct {
		a, b  string
		older bool
	}{{"8.0.1", "8.1.1", true}, {"8.1.1", "8.1.1", false}, {"9.0.0", "8.1.1", false}, {"8.1.10", "8.1.9", false}, {"7.2.4", "8.0.0", true}} {
		if got := OlderVersion(c.a, c.b); got != c.older {
			t.Errorf("OlderVersion(%s, %s) = %v, want %v", c.a, c.b, got, c.older)
		}
	}
}

func TestRDBFormatIsValkey9sFrom9(t *testing.T) {
	for version, want := range map[string]int{"7.2.4": 11, "8.0.1": 11, "8.1.1": 11, "9.0.0": 80, "9.1.2": 80, "10.0.0": 80} {
		if got := RDBFormat(version); got != want {
			t.Errorf("RDBFormat(%s) = %d, want %d", version, got, want)
		}
	}
}
