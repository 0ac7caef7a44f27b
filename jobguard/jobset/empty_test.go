package jobset_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// Every operation of a Set takes empty input, in each of its spellings (nil,
// empty, nothing but ids that name no row), answers with nothing, and
// leaves a caller's transaction usable: no statement fails on an empty
// list.
func TestSet_EmptyInputsAnswerNothingAndKeepTheTransaction(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		tx, err := jobs.Env.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		batch := jobset.New(jobs.Guard)

		for name, ids := range map[string][]string{"nil": nil, "empty": {}, "no valid id": {"", "not an id"}} {
			got, err := batch.Snapshot(ctx, tx, ids)
			require.NoError(t, err, name)
			require.Empty(t, got, name)
		}
		for name, states := range map[string][]jobset.Job{"nil": nil, "empty": {}} {
			res, err := batch.FailIfUnchanged(ctx, tx, states, "reason")
			require.NoError(t, err, name)
			require.Equal(t, jobset.FailResult{}, res, name)
		}
		types, err := batch.ActiveTypes(ctx, tx)
		require.NoError(t, err)
		if jobs.Table.TypeColumn == "" {
			require.Equal(t, []string{""}, types, "a table without a type column has one type")
		} else {
			require.Empty(t, types, "an empty table has no active type")
		}
		if jobs.Table.StartedAtColumn != "" {
			for name, limits := range map[string]map[string]time.Duration{"nil": nil, "empty": {}} {
				rows, err := batch.Overdue(ctx, tx, jobset.OverdueQuery{Limits: limits, Max: 10})
				require.NoError(t, err, name)
				require.Empty(t, rows, name)
			}
			_, err := batch.History(ctx, tx, jobset.HistoryQuery{Window: time.Hour, PerType: 10})
			require.ErrorContains(t, err, "Limits names no type", "a history of no type is refused, not sent")
		}

		var one int
		require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&one), "the caller's transaction is still usable")
	})
}
