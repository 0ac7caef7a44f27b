package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// A rescued job's comeback that records its object again before a retried
// upload meets the compensation of the object it recorded before it
// stopped: it lost the job, but to another attempt, as its save says. The
// refusal of its record says so too (ErrRequeued), and is not permanent, so
// that a queue deciding by IsPermanent delivers the job again rather than
// ending it while its row waits in QUEUED.
func TestRescue_ComebacksRecordOfACompensatedArtifactSaysTheJobGoesAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	b.env.Exec(compensate.Migration)
	arts, err := compensate.New(ctx, compensate.Config{Guard: b.jobs.Guard, DB: b.env.Pool,
		Compensators: map[string]compensate.Func{
			"object": func(context.Context, pgx.Tx, compensate.Artifact) error { return nil },
		}})
	require.NoError(t, err)

	stopped := b.startLease(t, lease.Config{})
	comeback := b.startUnder(t, stopped)
	ref := "videos/" + comeback.JobID + "/g1.mp4"
	require.NoError(t, arts.Record(ctx, b.env.Pool, comeback, "object", ref))
	require.NoError(t, stopped.Stop(ctx))
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{},
		Limits: reclaim.StaticLimits{"chapter": time.Hour}})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{comeback.JobID}, rep.RescuedIDs, logs.String())
	_, err = arts.Compensate(ctx) // the sweep beside the reclaimer
	require.NoError(t, err)

	err = arts.Record(ctx, b.env.Pool, comeback, "object", ref)
	require.ErrorIs(t, err, compensate.ErrCompensated, "the comeback must learn that it lost its job before it uploads")
	save := b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, comeback)
	require.ErrorIs(t, save, jobguard.ErrRequeued, "its save says the job went back to the queue")
	require.False(t, jobguard.IsPermanent(save), save.Error())
	require.ErrorIs(t, err, jobguard.ErrRequeued, "its record says so too: %v", err)
	require.False(t, jobguard.IsPermanent(err), err.Error())
}
