//go:build !integration

package resources

import (
	"testing"

	"example.com/cache-operator/test/harness/testenv"
)

func TestIntegrationTierNotSelected(t *testing.T) { testenv.SkipTier(t, "integration") }
