package testenv

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// WaitFor polls cond until it holds, failing the test with cond's last explanation after
// timeout. Tests wait on conditions, never on fixed sleeps.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) {
			ok, why := cond()
			last = why
			return ok, nil
		})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
	}
}
