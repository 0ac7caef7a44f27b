package riverguard_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/riversource"
)

// rescue runs one sweep of a reclaimer that rescues the jobs of dead
// leases, and requires that it rescued id.
func (b *bundle) rescue(t *testing.T, id string) {
	t.Helper()
	src, err := riversource.New(riversource.Config{DB: b.env.Pool, Schema: b.env.Schema})
	require.NoError(t, err)
	cfg := reclaim.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Redis: b.rdb, Source: src, Workers: &lease.Workers{},
		Limits: reclaim.StaticLimits{"chapter": time.Hour}, Logger: slog.New(slog.DiscardHandler)}
	if b.pub != nil {
		cfg.Notices = b.pub
	}
	r, err := reclaim.New(cfg)
	require.NoError(t, err)
	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{id}, rep.RescuedIDs, "report: %+v", rep)
}

// settle returns the River job's events until River is done with it.
func (b *bundle) settle(t *testing.T, riverID int64) []river.EventKind {
	t.Helper()
	var kinds []river.EventKind
	for {
		ev := b.await(t, riverID)
		kinds = append(kinds, ev.Kind)
		if ev.Kind != river.EventKindJobSnoozed && ev.Kind != river.EventKindJobFailed {
			return kinds
		}
		if ev.Job.State == rivertype.JobStateDiscarded {
			return kinds
		}
	}
}

// A worker process that only looked dead (stopped, cut off) past its
// lease comes back after the reclaimer rescued its job: the job is QUEUED
// again, waiting for another attempt, and the River job is the only
// delivery it has. River is told to run it again (a snooze, which uses up
// no attempt), not to cancel it: the next attempt starts the job under a
// live lease and completes it, once. Told by the watcher's notice, and,
// without a watcher, by the comeback's refused save.
func TestWork_ComebackAfterARescueRunsTheJobAgain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		watch bool
	}{{"told by the watcher", true}, {"told by its refused save", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			started, resume := make(chan struct{}, 1), make(chan struct{})
			comeback := make(chan error, 1)
			var calls atomic.Int32
			var b *bundle
			b = setup(t, func(ctx context.Context, _ *river.Job[chapterArgs]) error {
				if calls.Add(1) > 1 {
					return b.save(ctx)
				}
				started <- struct{}{}
				<-resume // stopped: it does nothing until it comes back
				if c.watch {
					// Its watcher heard the rescue's notice: the model call
					// honours the context it cancelled.
					<-ctx.Done()
					comeback <- context.Cause(ctx)
					return ctx.Err()
				}
				err := b.save(ctx)
				comeback <- err
				return err
			}, options{Watch: c.watch, StartGuard: jobguard.StartGuardConfig{Owner: &fixture.Handover{}}})
			h := b.ownerOf(t)
			stopped := h.Take(t, b.env)
			id := b.queue(t)
			riverID := b.insert(t, chapterArgs{JobID: id})
			waitFor(t, started, "the worker to start")

			require.NoError(t, stopped.Stop(ctx)) // dead, as the reclaimer sees it
			h.Take(t, b.env)                      // the next start is another process's
			b.rescue(t, id)
			close(resume)

			err := <-comeback
			require.ErrorIs(t, err, jobguard.ErrJobTerminal, "the comeback lost its job")
			if !c.watch {
				require.ErrorIs(t, err, jobguard.ErrRequeued, "its refused save says it went back to the queue")
			}
			kinds := b.settle(t, riverID)
			require.Equal(t, []river.EventKind{river.EventKindJobSnoozed, river.EventKindJobCompleted}, kinds)
			job := b.riverJob(t, riverID)
			require.Equal(t, rivertype.JobStateCompleted, job.State)
			row := b.jobs.Read(t, id)
			require.Equal(t, b.jobs.Table.Statuses.Completed, row.Status)
			require.Equal(t, int64(3), row.Generation, "started, rescued, started again")
			require.Equal(t, 1, b.chapters(t, id), "completed once")
			require.EqualValues(t, 2, calls.Load())
		})
	}
}

// ownerOf returns the handover the test's start guard was given.
func (b *bundle) ownerOf(t *testing.T) *fixture.Handover {
	t.Helper()
	require.NotNil(t, b.owner, "the test's StartGuard.Owner is a *fixture.Handover")
	return b.owner
}

// River's own rescuer and the reclaimer's rescue meet over a worker that
// only looked dead: whichever starts the job first wins by generation.
// Before the rescue, River's rescuer re-queues its job and the new attempt
// starts the row under a live lease: the rescue finds nothing to do. After
// the rescue, the new attempt starts the QUEUED row. Either way the job is
// completed once, and the stopped attempt, back at last, is refused and
// changes nothing, neither the row nor River's completed job.
func TestWork_RiversRescuerAndTheRescueMeet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		rescueFirst bool
	}{{"River's rescuer first", false}, {"the rescue first", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			started, resume := make(chan struct{}, 1), make(chan struct{})
			comeback := make(chan error, 1)
			var calls atomic.Int32
			var b *bundle
			b = setup(t, func(ctx context.Context, _ *river.Job[chapterArgs]) error {
				if calls.Add(1) > 1 {
					return b.save(ctx)
				}
				started <- struct{}{}
				<-resume // stopped: it does nothing until it comes back
				// River's timeout ended its context long ago; its save is
				// tried all the same.
				err := b.save(context.WithoutCancel(ctx))
				comeback <- err
				return err
			}, options{StartGuard: jobguard.StartGuardConfig{Owner: &fixture.Handover{}},
				JobTimeout: 500 * time.Millisecond, RescueStuckJobsAfter: time.Second})
			h := b.ownerOf(t)
			stopped := h.Take(t, b.env)
			id := b.queue(t)
			riverID := b.insert(t, chapterArgs{JobID: id})
			waitFor(t, started, "the worker to start")
			require.NoError(t, stopped.Stop(ctx)) // dead, as the reclaimer sees it
			h.Take(t, b.env)                      // the next start is another process's

			if c.rescueFirst {
				b.rescue(t, id)
			}
			// River's rescuer (every 30 s) re-queues the job it thinks stuck,
			// and its next attempt completes it.
			ev := b.await(t, riverID)
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "River job: %s", ev.Job.State)
			if !c.rescueFirst {
				src, err := riversource.New(riversource.Config{DB: b.env.Pool, Schema: b.env.Schema})
				require.NoError(t, err)
				r, err := reclaim.New(reclaim.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Redis: b.rdb, Source: src,
					Workers: &lease.Workers{}, Limits: reclaim.StaticLimits{"chapter": time.Hour}, Logger: slog.New(slog.DiscardHandler)})
				require.NoError(t, err)
				rep, err := r.Sweep(ctx)
				require.NoError(t, err)
				require.Zero(t, rep.Rescued, "the new attempt started the job first")
			}

			close(resume)
			err := <-comeback
			require.ErrorIs(t, err, jobguard.ErrJobTerminal)
			require.True(t, jobguard.IsPermanent(err), "the job is done: %v", err)
			// Once River has applied the stopped attempt's answer (Stop
			// waits for it), its job is still completed: the answer found
			// it no longer running.
			require.NoError(t, b.client.Stop(ctx))
			require.Equal(t, rivertype.JobStateCompleted, b.riverJob(t, riverID).State)
			row := b.jobs.Read(t, id)
			require.Equal(t, b.jobs.Table.Statuses.Completed, row.Status)
			wantGen := int64(2) // started, started again by River's new attempt
			if c.rescueFirst {
				wantGen = 3 // started, rescued, started again
			}
			require.Equal(t, wantGen, row.Generation)
			require.Equal(t, 1, b.chapters(t, id), "completed once")
			require.EqualValues(t, 2, calls.Load())
		})
	}
}
