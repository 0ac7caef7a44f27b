package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// namedOwner is a worker process's lease as the start guard sees it, for
// a lease row the test writes itself.
type namedOwner string

func (o namedOwner) ID() string { return string(o) }
func (namedOwner) Err() error   { return nil }

// A renewal under way as its lease expires (written, not yet committed)
// keeps the lease's jobs: the rescue skips a lease row another
// transaction holds rather than judge it on the version before, which
// the renewal is about to replace. Else both would win: the rescue sends
// the job back, and the worker, whose renewal then commits, believes its
// lease was never lost.
func TestSweep_RenewalUnderWayAsTheLeaseExpiresKeepsItsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	const owner = "w-renewing"
	workers := lease.WorkersTableDefault
	b.env.Exec(`INSERT INTO ` + workers + ` (id, host, pid, started_at, renewed_at, expires_at)
		VALUES ('` + owner + `', '', 0, now(), now(), now() + interval '500 milliseconds')`)
	exec := b.startUnder(t, namedOwner(owner))

	// The renewal has written its row and not committed yet.
	renewal, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = renewal.Rollback(ctx) }()
	tag, err := renewal.Exec(ctx, `UPDATE `+workers+` SET renewed_at = now(), expires_at = now() + interval '1 hour'
		WHERE id = $1 AND expires_at > clock_timestamp()`, owner)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	require.Eventually(t, func() bool {
		var past bool
		err := b.env.Pool.QueryRow(ctx, `SELECT now() > expires_at FROM `+workers+` WHERE id = $1`, owner).Scan(&past)
		return err == nil && past
	}, testenv.Patience, 20*time.Millisecond, "the committed lease expires")

	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{},
		Limits: reclaim.StaticLimits{"chapter": time.Hour}})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Rescued, "a lease a renewal holds is taken for live; %s", logs.String())
	require.NoError(t, renewal.Commit(ctx))

	row := b.jobs.Read(t, exec.JobID)
	require.Equal(t, b.jobs.Table.Statuses.Processing, row.Status)
	require.Equal(t, exec.Generation, row.Generation)
}
