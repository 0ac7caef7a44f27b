package jobset_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

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
	env.Exec(`CREATE TABLE caller_writes (n int)`)

	c, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	_, err = c.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `INSERT INTO caller_writes VALUES (1)`)
	require.NoError(t, err)

	tx, _, err := set.BeginFailIfUnchanged(ctx, c.Conn(), []jobset.Job{snap[id]}, "stuck")
	if err == nil {
		_ = tx.Commit(ctx)
	}
	_, rerr := c.Exec(ctx, `ROLLBACK`)
	require.NoError(t, rerr)

	var n int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM caller_writes`).Scan(&n))
	require.Zero(t, n, "the caller's rolled-back write stays rolled back")
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
	env.Exec(`CREATE TABLE caller_writes (n int)`)

	c, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	_, err = c.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `INSERT INTO caller_writes VALUES (1)`)
	require.NoError(t, err)

	_, err = jobset.New(jobs.Guard).Settled(ctx, c.Conn(), []string{id})
	_, rerr := c.Exec(ctx, `ROLLBACK`)
	require.NoError(t, rerr)

	var n int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM caller_writes`).Scan(&n))
	require.Zero(t, n, "the caller's rolled-back write stays rolled back")
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
}
