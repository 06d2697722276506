//go:build !integration

package valkey_test

import (
	"testing"

	"example.com/cache-operator/test/harness/testenv"
)

func TestIntegrationTierNotSelected(t *testing.T) { testenv.SkipTier(t, "integration") }
