package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// A share that is not a number is a usage error, as one above 1 is.
func TestSweep_BrakeShareThatIsNotANumberIsAUsageError(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	for _, flag := range []string{"--brake-max-share", "--brake-max-share-per-type"} {
		r := b.run(t, "sweep", flag, "NaN")
		require.Equal(t, 2, r.code, r)
		require.NotContains(t, r.stderr, "above 1", r)
	}
}
