//go:build !integration

package readiness

import (
	"testing"

	"example.com/cache-operator/test/harness/testenv"
)

func TestIntegrationTierNotSelected(t *testing.T) { testenv.SkipTier(t, "integration") }
