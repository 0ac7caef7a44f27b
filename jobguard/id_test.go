package jobguard_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

func TestCanonicalID_OneSpellingPerJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		variant fixture.Variant
		in, out string
	}{
		{fixture.Default, "7C9E6679-7425-40DE-944B-E07FC1F90AE7", "7c9e6679-7425-40de-944b-e07fc1f90ae7"},
		{fixture.Default, "7c9e6679742540de944be07fc1f90ae7", "7c9e6679-7425-40de-944b-e07fc1f90ae7"},
		{fixture.IntID, "0042", "42"},
		{fixture.IntID, "+42", "42"},
		{fixture.TextID, "Export/A", "Export/A"},
	} {
		t.Run(tc.variant.Name+"/"+tc.in, func(t *testing.T) {
			t.Parallel()
			jobs := fixture.Create(t, testenv.New(t), tc.variant)
			got, err := jobs.Guard.CanonicalID(tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.out, got)
		})
	}
	jobs := fixture.Create(t, testenv.New(t), fixture.Default)
	_, err := jobs.Guard.CanonicalID("not-a-uuid")
	require.ErrorIs(t, err, jobguard.ErrInvalidJobID)
}
