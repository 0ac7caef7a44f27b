package asynqguard_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// textIDCases are payloads naming a row of a text id column, and the row
// each names; riverguard's tests hold the same list for River's args, so
// that one delivery names one row on either queue.
var textIDCases = []struct{ payload, row string }{
	{`{"job_id":"-0"}`, "-0"},
	{`{"job_id":-0}`, "0"},
	{`{"job_id":"+0042"}`, "+0042"},
	{`{"job_id":"0042"}`, "0042"},
	{`{"job_id":42}`, "42"},
	{`{"job_id":1e3}`, "1000"},
	{`{"job_id":"6F9619FF-8B86-D011-B42D-00C04FC964FF"}`, "6F9619FF-8B86-D011-B42D-00C04FC964FF"},
}

// TestMiddleware_TextIDColumnNamesTheRowAsSpelled runs a task for every
// case over a text id column, whose every spelling is a row of its own:
// each starts exactly the row its payload names.
func TestMiddleware_TextIDColumnNamesTheRowAsSpelled(t *testing.T) {
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
	mw, err := asynqguard.New(asynqguard.Config{StartGuard: starts, DB: env.Pool})
	require.NoError(t, err)
	for _, c := range textIDCases {
		var got jobguard.Execution
		h := mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			got, _ = asynqguard.Execution(ctx)
			return nil
		}))
		require.NoError(t, h.ProcessTask(ctx, asynq.NewTask(taskType, []byte(c.payload))), c.payload)
		require.Equal(t, c.row, got.JobID, "%s names row %q", c.payload, c.row)
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, c.row).Status, c.payload)
	}
	require.Equal(t, jobs.Table.Statuses.Queued, jobs.Read(t, "6f9619ff-8b86-d011-b42d-00c04fc964ff").Status,
		"an upper-case uuid in a text column is a row of its own")
}
