package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/commitgate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// A cancel that committed unheard is published on Redis for the execution
// it took the job from, also when a redelivery started the job again
// between the command's first read and its cancel: the execution the
// cancel fenced out is the redelivered one, and its watcher is told.
func TestCancel_CommittedUnheardAfterARedeliveryIsPublishedOnRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, fixture.Default)
	w, err := watch.New(watch.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Transport: watch.Transport{Redis: b.env.Redis},
		CheckInterval: time.Hour})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })
	<-w.Ready()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	gate := commitgate.New(t, b.env, b.jobs.Table.QualifiedName())

	// A redelivery of the PROCESSING job starts it again, in a
	// transaction that commits only once the cancel waits for its row.
	sg, err := jobguard.NewStartGuard(b.jobs.Guard, b.env.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	redelivery, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = redelivery.Rollback(ctx) }()
	var pid int32
	require.NoError(t, redelivery.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	exec, err := sg.Start(ctx, redelivery, id)
	require.NoError(t, err)
	require.Equal(t, int64(2), exec.Generation)
	runCtx, release := w.Watch(ctx, exec)
	defer release()

	args := b.args("--notices", "redis", id)
	require.Equal(t, "--database-url", args[0])
	args[1] = gate.URL
	opened := make(chan error, 1)
	go func() { opened <- gate.Intercept(gate.Cut, false) }()
	ran := make(chan result, 1)
	go func() { ran <- jg(t, append([]string{"cancel"}, args...)...) }()

	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting))
		return waiting
	}, testenv.Patience, 5*time.Millisecond, "the cancel waits for the redelivery's row")
	require.NoError(t, redelivery.Commit(ctx))

	r := <-ran
	require.NoError(t, <-opened)
	row := b.jobs.Read(t, id)
	require.Equal(t, "FAILED", row.Status, "the server committed the cancel")
	require.Equal(t, exitOK, r.code, r)
	select {
	case <-runCtx.Done():
	case <-time.After(testenv.Patience):
		t.Fatal("the redelivered execution was not cancelled")
	}
	var lost *watch.LostError
	require.True(t, errors.As(context.Cause(runCtx), &lost), "%v", context.Cause(runCtx))
	require.True(t, lost.Cancelled)
}
