//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/testenv"
)

// Lease of the e2e operators: short timings, so handovers are quick to observe.
const (
	leaderElectionID = "cache-operator-e2e"
	leaseDuration    = 6 * time.Second
	renewDeadline    = 4 * time.Second
	retryPeriod      = time.Second
)

// startOperator starts an operator process under the operator's ServiceAccount, with the
// catalogue at catalogEndpoint (empty: none) and any extra flags. Its conversion webhook joins
// the others behind the webhooks balancer until the test ends.
func startOperator(t *testing.T, name, catalogEndpoint string, extraArgs ...string) *testenv.Operator {
	t.Helper()
	return startOperatorWithWebhook(t, operatorBinary, name, catalogEndpoint, extraArgs...)
}

// startOperatorWithWebhook is startOperator for an operator binary other than this checkout's,
// of a release that serves the conversion webhook.
func startOperatorWithWebhook(t *testing.T, binary, name, catalogEndpoint string, extraArgs ...string) *testenv.Operator {
	t.Helper()
	port := testenv.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := append(localcluster.OperatorWebhookArgs(port), extraArgs...)
	o := startOperatorBinary(t, binary, name, catalogEndpoint, args...)
	o.WebhookAddr = addr
	webhooks.Add(addr)
	t.Cleanup(func() { webhooks.Remove(addr) })
	return o
}

// startOperatorBinary is startOperator for an operator binary other than this checkout's.
func startOperatorBinary(t *testing.T, binary, name, catalogEndpoint string, extraArgs ...string) *testenv.Operator {
	t.Helper()
	args := []string{
		"--leader-election-namespace", localcluster.OperatorNamespace,
		"--leader-election-id", leaderElectionID,
		"--leader-elect-lease-duration", leaseDuration.String(),
		"--leader-elect-renew-deadline", renewDeadline.String(),
		"--leader-elect-retry-period", retryPeriod.String(),
		"--catalog-request-timeout", "2s",
	}
	if catalogEndpoint != "" {
		args = append(args, "--catalog-endpoints", catalogEndpoint)
	}
	if s := scopeOf(t); s != nil {
		args = append(args, s.operatorArgs()...)
	}
	return testenv.StartOperator(t, binary, name, operatorKubeconfig, append(args, extraArgs...)...)
}

// isLeader reports whether the operator holds the leader election Lease.
func isLeader(t *testing.T, o *testenv.Operator) bool {
	return testenv.Sum(o.Metrics(t), "leader_election_master_status", nil) == 1
}
