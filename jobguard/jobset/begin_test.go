package jobset_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// handBegun returns a connection on which the caller sent BEGIN itself and
// wrote a row, and the caller's ROLLBACK, which checks that the row is
// gone: that nothing committed the caller's transaction for it.
func handBegun(t *testing.T, env *testenv.Env) (*pgx.Conn, func()) {
	t.Helper()
	ctx := context.Background()
	env.Exec(`CREATE TABLE caller_writes (n int)`)
	c, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(c.Release)
	_, err = c.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `INSERT INTO caller_writes VALUES (1)`)
	require.NoError(t, err)
	return c.Conn(), func() {
		t.Helper()
		_, err := c.Exec(ctx, `ROLLBACK`)
		require.NoError(t, err)
		var n int
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM caller_writes`).Scan(&n))
		require.Zero(t, n, "the caller's rolled-back write stays rolled back")
	}
}

// A connection on which the caller sent BEGIN itself is refused with
// ErrInTransaction before anything is written: the server would ignore
// the write's BEGIN, and its COMMIT would commit the caller's transaction
// for it, so that the caller's ROLLBACK undoes nothing.
func TestBeginFailIfUnchanged_ConnectionInsideATransactionIsRefused(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{UpdatedAgo: time.Hour})
	set := jobset.New(jobs.Guard)
	snap, err := set.Snapshot(ctx, env.Pool, []string{id})
	require.NoError(t, err)
	c, rollback := handBegun(t, env)

	tx, _, err := set.BeginFailIfUnchanged(ctx, c, []jobset.Job{snap[id]}, "stuck")
	if err == nil {
		_ = tx.Commit(ctx)
	}
	rollback()
	require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status, "nothing was written in the caller's transaction")
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
}

// Settled begins a transaction of its own, so it refuses a connection on
// which the caller sent BEGIN, whose transaction its COMMIT would end.
func TestSettled_ConnectionInsideATransactionIsRefused(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{})
	c, rollback := handBegun(t, env)

	_, err := jobset.New(jobs.Guard).Settled(ctx, c, []string{id})
	rollback()
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
}
