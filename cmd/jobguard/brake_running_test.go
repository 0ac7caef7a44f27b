package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// The share caps of sweep are shares of the running jobs, as the table
// counts them, not of the jobs over their limit: 30 stalled among 130
// running are under half, and the default brake lets all 30 through, as
// the library's sweep over the same table does.
func TestSweep_ShareCapIsAShareOfEveryRunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	b.env.Exec(`INSERT INTO jobs (type, status, generation, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', 1, now() - interval '5 minutes', now() FROM generate_series(1, 100)`)
	stallChapters(b, 30)

	r := b.run(t, "sweep")
	require.Equal(t, 0, r.code, r)
	require.NotContains(t, r.stdout, "Braked:", r.stdout)
	require.Contains(t, r.stdout, "Reclaimed 30: ", r.stdout)
	require.Equal(t, 30, countFailed(t, b))
}
