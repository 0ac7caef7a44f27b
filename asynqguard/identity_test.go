package asynqguard_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

// TestMiddleware_EverySpellingOfARowIDIsOneExecution hands the middleware
// tasks whose payloads name one row through every spelling of its id, as
// asynq's server calls it: each starts the row and gives the handler an
// execution named by the canonical id.
func TestMiddleware_EverySpellingOfARowIDIsOneExecution(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		starts, err := jobguard.NewStartGuard(jobs.Guard, jobs.Env.Redis, jobguard.StartGuardConfig{})
		require.NoError(t, err)
		mw, err := asynqguard.New(asynqguard.Config{StartGuard: starts, DB: jobs.Env.Pool})
		require.NoError(t, err)
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
		for i, sp := range jobs.Spellings(id) {
			data, err := json.Marshal(map[string]string{"job_id": sp.ID})
			require.NoError(t, err)
			var got jobguard.Execution
			h := mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				got, _ = asynqguard.Execution(ctx)
				return nil
			}))
			require.NoError(t, h.ProcessTask(ctx, asynq.NewTask(taskType, data)), "%s %q", sp.Name, sp.ID)
			require.Equal(t, id, got.JobID, "%s %q: the execution names the row by its canonical id", sp.Name, sp.ID)
			if jobs.Guard.Fenced() {
				require.EqualValues(t, i+1, got.Generation, "each delivery starts the one row again")
			}
		}
	})
}
