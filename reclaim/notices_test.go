package reclaim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/watch"
)

// A sweep's notice reaches a worker's watcher and cancels the reclaimed
// execution's context within a second; the slow but progressing job's
// execution is left running.
func TestSweep_NoticeCancelsTheReclaimedExecution(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	transport := watch.Transport{Redis: env.Redis}

	w, err := watch.New(watch.Config{Guard: jobs.Guard, DB: env.Pool, Transport: transport, CheckInterval: time.Hour})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	require.Eventually(t, w.Subscribed, 10*time.Second, time.Millisecond)

	stalled := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: 2 * time.Hour})
	alive := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: 2 * time.Hour})
	setUpdatedAgo(t, jobs, alive, time.Minute)
	stalledCtx, release := w.Watch(ctx, jobguard.Execution{JobID: stalled, Generation: 2})
	defer release()
	aliveCtx, releaseAlive := w.Watch(ctx, jobguard.Execution{JobID: alive, Generation: 2})
	defer releaseAlive()

	pub, err := watch.NewPublisher(jobs.Guard, transport)
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Notices: pub})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{stalled}, rep.ReclaimedIDs)
	swept := time.Now()

	select {
	case <-stalledCtx.Done():
	case <-time.After(time.Second):
		t.Fatal("the reclaimed execution was not cancelled within a second of the sweep")
	}
	t.Logf("cancelled %v after the sweep returned", time.Since(swept))
	var cause *watch.LostError
	require.ErrorAs(t, context.Cause(stalledCtx), &cause)
	require.EqualValues(t, 2, cause.Generation)
	require.ErrorIs(t, cause, jobguard.ErrJobTerminal)
	require.NoError(t, aliveCtx.Err(), "the progressing job's execution must keep running")
}

type failingPublisher struct{}

func (failingPublisher) Publish(context.Context, ...jobguard.Execution) error {
	return errors.New("channel unreachable")
}

func TestSweep_NoticeFailureIsCountedNotFatal(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	r, logs := newReclaimer(t, jobs, reclaim.Config{Notices: failingPublisher{}})

	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Reclaimed)
	require.Equal(t, 1, rep.NoticeErrors)
	require.Equal(t, "FAILED", jobs.Read(t, id).Status, "the database write stands")
	require.True(t, hasMarker(t, jobs, id), "the marker is written before the notice")
	require.Contains(t, logs.String(), `level=WARN msg="reclaim: sweep"`)
	require.Contains(t, logs.String(), `notice_error="channel unreachable"`)
}

// cancelAfterReclaim cancels the sweep's context as soon as the reclaim's
// conditional write has returned, the moment between the commit and the
// markers.
type cancelAfterReclaim struct{ cancel context.CancelFunc }

type reclaimWrite struct{}

func (c cancelAfterReclaim) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "SKIP LOCKED") {
		return context.WithValue(ctx, reclaimWrite{}, true)
	}
	return ctx
}

func (c cancelAfterReclaim) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if ctx.Value(reclaimWrite{}) != nil && data.Err == nil {
		c.cancel()
	}
}

func TestSweep_CancelledAfterCommitStillWritesMarkersAndNotices(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = cancelAfterReclaim{cancel}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pub := &recordingPublisher{}
	r, _ := newReclaimer(t, jobs, reclaim.Config{DB: pool, Notices: pub})

	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Error(t, ctx.Err(), "the tracer must have cancelled the sweep's context")
	require.Equal(t, []string{id}, rep.ReclaimedIDs)
	require.Zero(t, rep.MarkerErrors)
	require.True(t, hasMarker(t, jobs, id), "a committed reclaim must get its marker")
	require.Equal(t, []jobguard.Execution{{JobID: id, Generation: 1}}, pub.got)
}

type recordingPublisher struct{ got []jobguard.Execution }

func (p *recordingPublisher) Publish(ctx context.Context, notices ...jobguard.Execution) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.got = append(p.got, notices...)
	return nil
}
