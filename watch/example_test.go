package watch_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/watch"
)

// example is a schema of its own with the default jobs table, one
// PROCESSING job at generation 1, and a Redis channel of its own.
type example struct {
	env   *testenv.Env
	guard *jobguard.Guard
	exec  jobguard.Execution
}

func newExample() (example, func()) {
	t, done := testenv.ExampleTB()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	return example{env: env, guard: jobs.Guard, exec: jobguard.Execution{JobID: id, Generation: 1}}, done
}

// reclaim fails the example's job the way the reclaimer does, with the
// reclaimer's reason and without publishing a notice.
func reclaim(ctx context.Context, ex example) {
	rows, _ := jobset.New(ex.guard).Snapshot(ctx, ex.env.Pool, []string{ex.exec.JobID})
	_, _ = jobset.New(ex.guard).FailIfUnchanged(ctx, ex.env.Pool, []jobset.Job{rows[ex.exec.JobID]}, jobguard.ReclaimedReasonDefault)
}

func ExampleWatcher_Watch() {
	ex, done := newExample()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	transport := watch.Transport{Redis: ex.env.Redis}

	// One watcher per worker process.
	w, err := watch.New(watch.Config{Guard: ex.guard, DB: ex.env.Pool, Transport: transport})
	if err != nil {
		panic(err)
	}
	go w.Run(ctx)
	<-w.Ready() // take jobs once notices reach the watcher

	// Each execution runs its external call under the watched context.
	runCtx, release := w.Watch(ctx, ex.exec)
	defer release()

	// Meanwhile the reclaimer fails the job with the guard's reclaimed
	// reason and, once that committed, publishes a notice for it.
	pub, _ := watch.NewPublisher(ex.guard, transport)
	rows, _ := jobset.New(ex.guard).Snapshot(ctx, ex.env.Pool, []string{ex.exec.JobID})
	reclaimed, _ := jobset.New(ex.guard).FailIfUnchanged(ctx, ex.env.Pool, []jobset.Job{rows[ex.exec.JobID]},
		ex.guard.Shared().ReclaimedReason)
	_ = pub.Publish(ctx, watch.NoticesFrom(reclaimed.Failed)...)

	// The model call sees this and stops. The notice cancels it, or the
	// check the watcher runs on subscribing, whichever reads the reclaim
	// first.
	<-runCtx.Done()
	var lost *watch.LostError
	fmt.Println(errors.As(context.Cause(runCtx), &lost), lost.Generation)
	fmt.Println(jobguard.IsPermanent(context.Cause(runCtx)))
	// Output:
	// true 1
	// true
}

func ExampleWatcher_Lost() {
	ex, done := newExample()
	defer done()
	ctx := context.Background()
	w, _ := watch.New(watch.Config{Guard: ex.guard, DB: ex.env.Pool, Transport: watch.Transport{Redis: ex.env.Redis}})
	runCtx, release := w.Watch(ctx, ex.exec)
	defer release()

	reclaim(ctx, ex) // another process reclaims it

	// The worker's next heartbeat finds the job gone and says so.
	hb := heartbeat.New(ex.guard, heartbeat.Config{})
	if res, err := hb.Beat(ctx, ex.env.Pool, ex.exec, heartbeat.Progress(40)); res == heartbeat.Lost {
		w.Lost(ctx, ex.exec, err)
	}
	fmt.Println(runCtx.Err(), errors.Is(context.Cause(runCtx), jobguard.ErrJobTerminal))
	// Output: context canceled true
}

func ExampleWatcher_Check() {
	ex, done := newExample()
	defer done()
	ctx := context.Background()
	w, _ := watch.New(watch.Config{Guard: ex.guard, DB: ex.env.Pool, Transport: watch.Transport{Redis: ex.env.Redis}})
	runCtx, release := w.Watch(ctx, ex.exec)
	defer release()

	// The reclaim's notice was lost; Run's periodic check finds the row
	// changed all the same. Here it is called directly.
	reclaim(ctx, ex)
	n, err := w.Check(ctx)
	fmt.Println(n, err)
	var lost *watch.LostError
	if errors.As(context.Cause(runCtx), &lost) {
		fmt.Println(lost.Via, lost.Status, lost.Seen)
	}
	// Output:
	// 1 <nil>
	// check FAILED 1
}

func ExampleNewPublisher() {
	ex, done := newExample()
	defer done()

	// Over Postgres: LISTEN/NOTIFY on the guard's Shared.NoticeChannel, so
	// that PublishOn can send notices in the reclaim's own transaction.
	pub, err := watch.NewPublisher(ex.guard, watch.Transport{Postgres: ex.env.Pool})
	if err != nil {
		panic(err)
	}
	err = pub.Publish(context.Background(), watch.Notice{JobID: ex.exec.JobID, Generation: 1})
	fmt.Println(err)
	// Output: <nil>
}

func ExampleNoticesFrom() {
	reclaimed := []jobset.Job{{ID: "job-1", Status: "FAILED", Generation: 3}, {ID: "job-2", Status: "FAILED", Generation: 1}}
	fmt.Println(watch.NoticesFrom(reclaimed))
	// Output: [{job-1 3} {job-2 1}]
}

func ExampleNew() {
	_, err := watch.New(watch.Config{})
	fmt.Println(err)
	// Output: watch: new: Guard is nil
}
