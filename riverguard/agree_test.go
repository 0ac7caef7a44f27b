package riverguard_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/riverguard"
)

// textIDCases are args naming a row of a text id column, and the row each
// names; asynqguard's tests hold the same list for its payloads, so that
// one delivery names one row on either queue.
var textIDCases = []struct{ args, row string }{
	{`{"job_id":"-0"}`, "-0"},
	{`{"job_id":-0}`, "0"},
	{`{"job_id":"+0042"}`, "+0042"},
	{`{"job_id":"0042"}`, "0042"},
	{`{"job_id":42}`, "42"},
	{`{"job_id":1e3}`, "1000"},
	{`{"job_id":"6F9619FF-8B86-D011-B42D-00C04FC964FF"}`, "6F9619FF-8B86-D011-B42D-00C04FC964FF"},
}

// TestWork_TextIDColumnNamesTheRowAsSpelled runs a delivery for every case
// over a text id column, whose every spelling is a row of its own: each
// starts exactly the row its args name. The args reach the middleware as
// River hands them over, printed by jsonb.
func TestWork_TextIDColumnNamesTheRowAsSpelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.TextID)
	for _, c := range textIDCases {
		jobs.Insert(t, fixture.Job{ID: c.row, Status: jobs.Table.Statuses.Queued})
	}
	jobs.Insert(t, fixture.Job{ID: "6f9619ff-8b86-d011-b42d-00c04fc964ff", Status: jobs.Table.Statuses.Queued})
	starts, err := jobguard.NewStartGuard(jobs.NoRedis(t), nil, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	mw, err := riverguard.New(riverguard.Config{StartGuard: starts, DB: env.Pool, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	for i, c := range textIDCases {
		var stored []byte
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT $1::jsonb::text`, c.args).Scan(&stored))
		var got jobguard.Execution
		err := mw.Work(ctx, &rivertype.JobRow{ID: int64(i + 1), Kind: "chapter", EncodedArgs: stored}, func(ctx context.Context) error {
			got, _ = riverguard.Execution(ctx)
			return nil
		})
		require.NoError(t, err, c.args)
		require.Equal(t, c.row, got.JobID, "%s names row %q", c.args, c.row)
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, c.row).Status, c.args)
	}
	require.Equal(t, jobs.Table.Statuses.Queued, jobs.Read(t, "6f9619ff-8b86-d011-b42d-00c04fc964ff").Status,
		"an upper-case uuid in a text column is a row of its own")
}
