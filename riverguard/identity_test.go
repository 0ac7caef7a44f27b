package riverguard_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/riverguard"
)

// TestWork_EverySpellingOfARowIDIsOneExecution hands the middleware River
// jobs whose args name one row through every spelling of its id, as River
// calls it: each starts the row and gives the worker an execution named by
// the canonical id.
func TestWork_EverySpellingOfARowIDIsOneExecution(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		starts, err := jobguard.NewStartGuard(jobs.NoRedis(t), nil, jobguard.StartGuardConfig{})
		require.NoError(t, err)
		mw, err := riverguard.New(riverguard.Config{StartGuard: starts, DB: jobs.Env.Pool, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
		for i, sp := range jobs.Spellings(id) {
			args, err := json.Marshal(map[string]string{"job_id": sp.ID})
			require.NoError(t, err)
			var got jobguard.Execution
			err = mw.Work(ctx, &rivertype.JobRow{ID: int64(i + 1), Kind: "chapter", EncodedArgs: args}, func(ctx context.Context) error {
				got, _ = riverguard.Execution(ctx)
				return nil
			})
			require.NoError(t, err, "%s %q", sp.Name, sp.ID)
			require.Equal(t, id, got.JobID, "%s %q: the execution names the row by its canonical id", sp.Name, sp.ID)
			if jobs.Guard.Fenced() {
				require.EqualValues(t, i+1, got.Generation, "each delivery starts the one row again")
			}
		}
	})
}
