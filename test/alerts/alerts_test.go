//go:build integration

// Package alerts tests the operator's Prometheus alerts with promtool, built by the toolchain.
package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"example.com/cache-operator/test/harness/testenv"
)

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert string `json:"alert"`
		} `json:"rules"`
	} `json:"groups"`
}

type promtoolTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestAlerts runs promtool's unit tests on the groups of the PrometheusRule that we ship, and
// checks that they show every alert both firing and not firing.
func TestAlerts(t *testing.T) {
	root := testenv.Root()
	rule, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var prometheusRule struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(rule, &prometheusRule); err != nil {
		t.Fatal(err)
	}
	rules, err := yaml.Marshal(prometheusRule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(root, "test", "alerts", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range map[string][]byte{"rules.yaml": rules, "alerts_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(filepath.Join(testenv.BinDir(), "promtool"), "test", "rules", "alerts_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}

	var groups ruleGroups
	var cases promtoolTests
	if err := yaml.Unmarshal(rules, &groups); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(tests, &cases); err != nil {
		t.Fatal(err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, c := range cases.Tests {
		for _, a := range c.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !firing[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s is tested firing: %v, not firing: %v; want both", r.Alert, firing[r.Alert], quiet[r.Alert])
			}
		}
	}
}
