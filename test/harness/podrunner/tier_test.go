//go:build !integration

package podrunner

import (
	"testing"

	"example.com/cache-operator/test/harness/testenv"
)

func TestIntegrationTierNotSelected(t *testing.T) { testenv.SkipTier(t, "integration") }
