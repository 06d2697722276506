//go:build !e2e

package e2e

import (
	"testing"

	"example.com/cache-operator/test/harness/testenv"
)

func TestEndToEndTierNotSelected(t *testing.T) { testenv.SkipTier(t, "e2e") }
