//go:build !integration

package alerts

import (
	"testing"

	"example.com/cache-operator/internal/testenv"
)

func TestIntegrationTierNotSelected(t *testing.T) { testenv.SkipTier(t, "integration") }
