package asynqguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/watch"
)

// A worker process that only looked dead (stopped, cut off) past its
// lease comes back after the reclaimer rescued its job: the job is QUEUED
// again, and the task is the only delivery it has. asynq is given the
// loss to retry, not SkipRetry, and the retry, which IsFailure does not
// count, starts the job under a live lease and completes it, once. Told by
// the watcher's notice, and, without a watcher, by the refused save.
func TestMiddleware_ComebackAfterARescueRunsTheJobAgain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		watch bool
	}{{"told by the watcher", true}, {"told by its refused save", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.env.Exec(lease.Migration)
			h := &fixture.Handover{}
			starts, err := jobguard.NewStartGuard(b.jobs.Guard, b.env.Redis, jobguard.StartGuardConfig{Owner: h})
			require.NoError(t, err)
			cfg := asynqguard.Config{StartGuard: starts}
			var pub *watch.Publisher
			if c.watch {
				transport := watch.Transport{Redis: b.env.Redis}
				w, err := watch.New(watch.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Transport: transport, CheckInterval: time.Hour})
				require.NoError(t, err)
				wctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { defer close(done); _ = w.Run(wctx) }()
				t.Cleanup(func() { cancel(); <-done })
				<-w.Ready()
				pub, err = watch.NewPublisher(b.jobs.Guard, transport)
				require.NoError(t, err)
				cfg.Watcher = w
			}

			stopped := h.Take(t, b.env)
			id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED"})
			var n calls
			started, resume := make(chan struct{}, 1), make(chan struct{})
			comeback := make(chan error, 1)
			b.serve(t, cfg, func(ctx context.Context, _ *asynq.Task) error {
				n.add()
				exec, _ := asynqguard.Execution(ctx)
				if n.get() > 1 {
					return b.save(ctx, exec)
				}
				started <- struct{}{}
				<-resume // stopped: it does nothing until it comes back
				if c.watch {
					<-ctx.Done() // its watcher heard the rescue's notice
					comeback <- context.Cause(ctx)
					return ctx.Err()
				}
				err := b.save(ctx, exec)
				comeback <- err
				return err
			})
			task := b.enqueue(t, payload(id))
			recv(t, started, "start of the handler")

			require.NoError(t, stopped.Stop(ctx)) // dead, as the reclaimer sees it
			h.Take(t, b.env)                      // the next start is another process's
			src, err := reclaim.NewTableSource(b.jobs.Guard, b.env.Pool)
			require.NoError(t, err)
			rcfg := reclaim.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Redis: b.env.Redis, Source: src,
				Workers: &lease.Workers{}, Limits: reclaim.StaticLimits{taskType: time.Hour}}
			if pub != nil {
				rcfg.Notices = pub
			}
			r, err := reclaim.New(rcfg)
			require.NoError(t, err)
			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{id}, rep.RescuedIDs)
			close(resume)

			err = recv(t, comeback, "the comeback")
			require.ErrorIs(t, err, jobguard.ErrJobTerminal, "the comeback lost its job")
			if !c.watch {
				require.ErrorIs(t, err, jobguard.ErrRequeued, "its refused save says it went back to the queue")
			}
			info := b.settled(t, task)
			require.Equal(t, asynq.TaskStateCompleted, info.State, "last error %q", info.LastErr)
			require.Zero(t, info.Retried, "the lost attempt is not counted against MaxRetry")
			row := b.jobs.Read(t, id)
			require.Equal(t, "COMPLETED", row.Status)
			require.Equal(t, int64(3), row.Generation, "started, rescued, started again")
			require.Equal(t, 2, b.chapters(t, id), "completed once")
			require.EqualValues(t, 2, n.get())
		})
	}
}

// asynq's own redelivery and the reclaimer's rescue meet over a worker
// that only looked dead: a server that stops hands its unfinished task
// back to the queue, and another server's delivery starts the row,
// whether or not the rescue came first: whichever starts the job first
// wins by generation. The job completes once, and the stopped handler,
// back at last, is refused for good (the job is done) and its answer,
// given after asynq took the task back, changes nothing.
func TestMiddleware_AsynqsRedeliveryAndTheRescueMeet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		rescueFirst bool
	}{{"asynq's redelivery first", false}, {"the rescue first", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			b.env.Exec(lease.Migration)
			h := &fixture.Handover{}
			starts, err := jobguard.NewStartGuard(b.jobs.Guard, b.env.Redis, jobguard.StartGuardConfig{Owner: h})
			require.NoError(t, err)
			stopped := h.Take(t, b.env)
			id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED"})
			var n calls
			started, resume := make(chan struct{}, 1), make(chan struct{})
			comeback := make(chan error, 1)
			handler := func(ctx context.Context, _ *asynq.Task) error {
				n.add()
				exec, _ := asynqguard.Execution(ctx)
				if n.get() > 1 {
					return b.save(ctx, exec)
				}
				started <- struct{}{}
				<-resume // stopped: it does nothing until it comes back
				err := b.save(context.WithoutCancel(ctx), exec)
				comeback <- err
				return err
			}
			first := b.server(t, asynqguard.Config{StartGuard: starts}, handler, 100*time.Millisecond)
			task := b.enqueue(t, payload(id))
			recv(t, started, "start of the handler")
			require.NoError(t, stopped.Stop(ctx)) // dead, as the reclaimer sees it
			h.Take(t, b.env)                      // the next start is another process's

			sweep := func() reclaim.Report {
				src, err := reclaim.NewTableSource(b.jobs.Guard, b.env.Pool)
				require.NoError(t, err)
				r, err := reclaim.New(reclaim.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Redis: b.env.Redis, Source: src,
					Workers: &lease.Workers{}, Limits: reclaim.StaticLimits{taskType: time.Hour}})
				require.NoError(t, err)
				rep, err := r.Sweep(ctx)
				require.NoError(t, err)
				return rep
			}
			if c.rescueFirst {
				require.Equal(t, []string{id}, sweep().RescuedIDs)
			}
			// The stopping server gives the task it could not finish back
			// to the queue; another server delivers it.
			first.Shutdown()
			b.server(t, asynqguard.Config{StartGuard: starts}, handler, 5*time.Second)
			info := b.settled(t, task)
			require.Equal(t, asynq.TaskStateCompleted, info.State, "last error %q", info.LastErr)
			if !c.rescueFirst {
				require.Zero(t, sweep().Rescued, "asynq's delivery started the job first")
			}

			close(resume)
			err = recv(t, comeback, "the comeback")
			require.True(t, jobguard.IsPermanent(err), "the job is done: %v", err)
			require.NotErrorIs(t, err, jobguard.ErrRequeued)
			info, err = b.insp.GetTaskInfo(b.queue, task)
			require.NoError(t, err)
			require.Equal(t, asynq.TaskStateCompleted, info.State)
			row := b.jobs.Read(t, id)
			require.Equal(t, "COMPLETED", row.Status)
			wantGen := int64(2) // started, started again by asynq's delivery
			if c.rescueFirst {
				wantGen = 3 // started, rescued, started again
			}
			require.Equal(t, wantGen, row.Generation)
			require.Equal(t, 2, b.chapters(t, id), "completed once")
			require.EqualValues(t, 2, n.get())
		})
	}
}
