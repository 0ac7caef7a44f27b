package riverguard

import (
	"context"
	"log/slog"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/sourcetest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim/riversource"
)

// rowIDCases are args as stored in river_job, with the row id they name or
// a fragment of the refusal.
var rowIDCases = []struct {
	args, id, err string
}{
	{args: `{"job_id":"row-1"}`, id: "row-1"},
	{args: `{"job_id":"6F9619FF-8B86-D011-B42D-00C04FC964FF"}`, id: "6F9619FF-8B86-D011-B42D-00C04FC964FF"},
	{args: `{"job_id":42}`, id: "42"},
	{args: `{"job_id":-7}`, id: "-7"},
	{args: `{"job_id":1e3}`, id: "1000"}, // jsonb stores it as 1000
	{args: `{"job_id":"a\"b"}`, id: `a"b`},
	{args: `{"job_id":"x","weeks":2}`, id: "x"},
	{args: `{"job_id":"first","job_id":"last"}`, id: "last"},
	{args: `{"row":"x"}`, err: `no key "job_id"`},
	{args: `{"Job_ID":"x"}`, err: `no key "job_id"`},
	{args: `{"job_id":null}`, err: "a JSON null"},
	{args: `{"job_id":""}`, err: "an empty string"},
	{args: `{"job_id":1.5}`, err: "is 1.5"},
	{args: `{"job_id":1.0}`, err: "is 1.0"},
	{args: `{"job_id":9223372036854775808}`, err: "is 9223372036854775808"},
	{args: `{"job_id":true}`, err: "a JSON boolean"},
	{args: `{"job_id":{"id":"row-2"}}`, err: "a JSON object"},
	{args: `{"job_id":["row-2"]}`, err: "a JSON array"},
	{args: `["job_id"]`, err: `no key "job_id"`},
	{args: `"job_id"`, err: `no key "job_id"`},
	{args: `null`, err: `no key "job_id"`},
}

// River hands the middleware the args as the database prints them, and the
// reclaimer's riversource reads the same column: for every River job, both
// must name the same row, or refuse it, else the reclaimer would fail one
// row while the worker runs another.
func TestRowID_AgreesWithRiversource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	m, err := rivermigrate.New(riverpgxv5.New(env.Pool), &rivermigrate.Config{Schema: env.Schema, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(env.Pool), &river.Config{Schema: env.Schema, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	riverIDs := make([]int64, len(rowIDCases))
	for i, c := range rowIDCases {
		require.NoError(t, env.Pool.QueryRow(ctx, `INSERT INTO river_job
			(kind, queue, args, state, attempt, max_attempts, attempted_at)
			VALUES ('chapter', 'q', $1::jsonb, 'running', 1, 25, now()) RETURNING id`, c.args).Scan(&riverIDs[i]))
	}
	src, err := riversource.New(riversource.Config{DB: env.Pool, Schema: env.Schema})
	require.NoError(t, err)
	listed, err := sourcetest.All(ctx, src, 100)
	require.NoError(t, err)
	require.Len(t, listed, len(rowIDCases))

	for i, c := range rowIDCases {
		job, err := client.JobGet(ctx, riverIDs[i])
		require.NoError(t, err)
		id, err := rowID(job.EncodedArgs, riversource.RowIDKeyDefault)
		if c.err == "" {
			require.NoError(t, listed[i].Err, c.args)
			require.NoError(t, err, "%s (stored as %s)", c.args, job.EncodedArgs)
			require.Equal(t, c.id, id, c.args)
			require.Equal(t, listed[i].ID, id, "%s: riversource names row %s", c.args, listed[i].ID)
			continue
		}
		require.ErrorIs(t, listed[i].Err, riversource.ErrNoRowID, c.args)
		require.ErrorContains(t, listed[i].Err, c.err, c.args)
		require.ErrorIs(t, err, riversource.ErrNoRowID, "%s (stored as %s)", c.args, job.EncodedArgs)
		require.ErrorContains(t, err, c.err, c.args)
		require.True(t, jobguard.IsPermanent(err), "args that name no row never will")
	}
}

func TestRowID_NotJSON(t *testing.T) {
	t.Parallel()
	_, err := rowID([]byte(`{"job_id":`), "job_id")
	require.ErrorContains(t, err, "args do not name a row: not JSON")
	require.ErrorIs(t, err, jobguard.ErrInvalidJobID)
}
