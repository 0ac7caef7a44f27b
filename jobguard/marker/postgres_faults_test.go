package marker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// A marker table that cannot be read (dropped after the guard was built)
// is a failed lookup for Start as it is for Check: fail-closed refuses
// with ErrGuardUnavailable, fail-open lets the job through with a warning,
// inside a caller's transaction too.
func TestPostgresStore_UnreadableTableFollowsTheLookupPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	guard := jobs.NoRedis(t)
	var logs bytes.Buffer
	open, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	closed, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{OnLookupError: jobguard.FailClosed})
	require.NoError(t, err)
	id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
	env.Exec(`DROP TABLE job_reclaim_markers`)

	require.ErrorIs(t, closed.Check(ctx, env.Pool, id), jobguard.ErrGuardUnavailable, "Check follows the policy")
	_, err = closed.Start(ctx, env.Pool, id)
	assert.ErrorIs(t, err, jobguard.ErrGuardUnavailable, "fail-closed Start")

	require.NoError(t, open.Check(ctx, env.Pool, id), "Check follows the policy")
	_, err = open.Start(ctx, env.Pool, id)
	assert.NoError(t, err, "fail-open Start lets the job through")
	assert.Contains(t, logs.String(), "start guard lookup failed")

	// In the caller's transaction the failed lookups leave the transaction
	// usable: the start commits with it.
	var exec jobguard.Execution
	require.NoError(t, pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		if err := open.Check(ctx, tx, id); err != nil {
			return err
		}
		exec, err = open.Start(ctx, tx, id)
		return err
	}))
	require.NoError(t, guard.CompleteIfActive(ctx, env.Pool, exec), "the start in the transaction committed")
}

// A jobs table whose bare name is an alias the start statement uses, or
// that has the marker table's own name: a Retry still bumps the job past
// its marker.
func TestPostgresStore_RetryStartsWhateverTheTablesName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"m", "t", "u", "j", marker.TableName} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := testenv.New(t)
			env.Exec(marker.Migration)
			table := jobguard.DefaultTable()
			table.Name = name
			// Found on the search_path by its bare name; only the marker
			// table's namesake lives in a schema of its own.
			jobs := env
			if name == marker.TableName {
				jobs = testenv.New(t)
				table.Schema = jobs.Schema
			}
			jobs.Exec(strings.ReplaceAll(jobguard.Migration, " jobs ", " "+ident.Quote(name)+" "))
			guard, err := jobguard.NewWithConfig(ctx, env.Pool, table, jobguard.GuardConfig{Shared: jobguard.Shared{Markers: jobguard.MarkersPostgres}})
			require.NoError(t, err)
			sg, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{})
			require.NoError(t, err)
			var id string
			require.NoError(t, env.Pool.QueryRow(ctx, `INSERT INTO `+table.QualifiedName()+` (type) VALUES ('chapter') RETURNING id::text`).Scan(&id))

			exec, err := sg.Start(ctx, env.Pool, id)
			require.NoError(t, err)
			require.NoError(t, pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
				if err := guard.Fail(ctx, tx, exec, jobguard.ReclaimedReasonDefault); err != nil {
					return err
				}
				return sg.PostgresMarkers().Write(ctx, tx, marker.Marker{JobID: id, Generation: exec.Generation, Reason: jobguard.ReclaimedReasonDefault})
			}))
			_, err = sg.Start(ctx, env.Pool, id)
			require.ErrorIs(t, err, jobguard.ErrReclaimed)

			gen, err := guard.Retry(ctx, env.Pool, id)
			require.NoError(t, err)
			require.Greater(t, gen, exec.Generation)
			_, err = sg.Start(ctx, env.Pool, id)
			require.NoError(t, err, "the marker of generation %d does not block generation %d", exec.Generation, gen)
		})
	}
}
