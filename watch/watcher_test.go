package watch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/watch"
)

// noChecks keeps the periodic check out of the way, so that a cancellation
// can only come from the path under test (the check after subscribing
// still runs, before any job exists).
var noChecks = watch.Config{CheckInterval: time.Hour}

func eachTransport(t *testing.T, fn func(t *testing.T, kind string)) {
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			if kind == "redis" {
				testenv.NeedRedis(t)
			}
			fn(t, kind)
		})
	}
}

func TestWatch_NoticeCancelsReclaimedExecutionWithinASecond(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, kind string) {
		b := setup(t, kind, fixture.Default, noChecks)
		reclaimed, unrelated := b.start(t, 3), b.start(t, 3)
		ctx := b.watch(t, reclaimed)
		other := b.watch(t, unrelated)

		at := b.reclaim(t, true, reclaimed.JobID)
		cause, took := cancelledWithin(t, ctx, at, time.Second)
		t.Logf("%s: cancelled %v after the reclaim committed", kind, took)

		require.Equal(t, watch.ViaNotice, cause.Via)
		require.Equal(t, reclaimed.JobID, cause.JobID)
		require.EqualValues(t, 3, cause.Generation)
		require.EqualValues(t, 3, cause.Seen)
		require.Contains(t, cause.Error(), "reclaimed")
		requireAlive(t, other, "the unrelated job's execution")
		require.Equal(t, 1, b.w.Len())
		require.Contains(t, b.logs.String(), "job_id="+reclaimed.JobID)
	})
}

// sync publishes a notice for a fresh job and waits for its cancellation:
// notices travel in order on the one channel, so every notice published
// before it has been applied by then.
func (b *bundle) sync(t *testing.T) {
	t.Helper()
	marker := b.start(t, 1)
	ctx := b.watch(t, marker)
	require.NoError(t, b.pub.Publish(context.Background(), watch.Notice{JobID: marker.JobID, Generation: 1}))
	cancelledWithin(t, ctx, time.Now(), time.Second)
}

func TestWatch_NoticeOfOlderGenerationSparesNewerExecution(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, kind string) {
		b := setup(t, kind, fixture.Default, noChecks)
		newer := b.start(t, 5)
		stale := jobguard.Execution{JobID: newer.JobID, Generation: 4} // still running in this process
		newerCtx := b.watch(t, newer)
		staleCtx := b.watch(t, stale)

		require.NoError(t, b.pub.Publish(context.Background(), watch.Notice{JobID: newer.JobID, Generation: 4}))
		b.sync(t)

		cause, _ := cancelledWithin(t, staleCtx, time.Now(), time.Second)
		require.Equal(t, watch.ViaNotice, cause.Via)
		require.EqualValues(t, 4, cause.Generation)
		requireAlive(t, newerCtx, "the newer execution")
	})
}

func TestWatch_LateNoticeSparesExecutionStartedAfterRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, "redis", fixture.Default, noChecks)
	ctx := context.Background()
	first := b.start(t, 1)
	b.reclaim(t, false, first.JobID)
	_, err := b.jobs.Guard.Retry(ctx, b.env.Pool, first.JobID)
	require.NoError(t, err)
	starts, err := jobguard.NewStartGuard(b.jobs.Guard, b.env.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	second, err := starts.Start(ctx, b.env.Pool, first.JobID)
	require.NoError(t, err)
	require.Greater(t, second.Generation, first.Generation)
	secondCtx := b.watch(t, second)

	// The first reclaim's notice arrives only now.
	require.NoError(t, b.pub.Publish(ctx, first))
	b.sync(t)
	requireAlive(t, secondCtx, "the execution started after the retry")
}

func TestWatch_CheckCatchesReclaimWhoseNoticeWasLost(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, kind string) {
		interval := 100 * time.Millisecond
		b := setup(t, kind, fixture.Default, watch.Config{CheckInterval: interval})
		reclaimed, owned := b.start(t, 2), b.start(t, 2)
		ctx := b.watch(t, reclaimed)
		other := b.watch(t, owned)

		at := b.reclaim(t, false, reclaimed.JobID)
		cause, took := cancelledWithin(t, ctx, at, time.Second)
		t.Logf("%s: check interval %v: cancelled %v after the reclaim committed", kind, interval, took)

		require.Equal(t, watch.ViaCheck, cause.Via)
		require.Equal(t, "FAILED", cause.Status)
		require.EqualValues(t, 2, cause.Seen)
		time.Sleep(3 * interval)
		requireAlive(t, other, "an execution that still owns its row")
	})
}

func TestWatch_CheckCancelsSupersededAndMissingJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres", fixture.Default, noChecks)
	superseded := b.start(t, 1)
	b.env.Exec(`UPDATE jobs SET generation = 2 WHERE id = $1`, superseded.JobID)
	superCtx := b.watch(t, superseded)
	missingCtx := b.watch(t, jobguard.Execution{JobID: "00000000-0000-0000-0000-000000000001", Generation: 1})
	ownCtx := b.watch(t, b.start(t, 1))

	n, err := b.w.Check(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	cause, _ := cancelledWithin(t, superCtx, time.Now(), time.Second)
	require.Equal(t, "PROCESSING", cause.Status)
	require.EqualValues(t, 2, cause.Seen)
	cause, _ = cancelledWithin(t, missingCtx, time.Now(), time.Second)
	require.Contains(t, cause.Error(), "no such job")
	requireAlive(t, ownCtx, "the execution that owns its row")
}

func TestLost_TerminalHeartbeatCancelsExecution(t *testing.T) {
	t.Parallel()
	b := setup(t, "redis", fixture.Default, noChecks)
	ctx := context.Background()
	exec, other := b.start(t, 1), b.start(t, 1)
	execCtx := b.watch(t, exec)
	otherCtx := b.watch(t, other)
	b.reclaim(t, false, exec.JobID)

	res, err := heartbeat.New(b.jobs.Guard, heartbeat.Config{}).Beat(ctx, b.env.Pool, exec, heartbeat.Progress(50))
	require.Equal(t, heartbeat.Lost, res)
	require.False(t, b.w.Lost(context.Background(), other, errors.New("connection refused")), "a non-terminal error must not cancel")
	require.True(t, b.w.Lost(context.Background(), exec, err))

	cause, _ := cancelledWithin(t, execCtx, time.Now(), time.Second)
	require.Equal(t, watch.ViaHeartbeat, cause.Via)
	require.ErrorIs(t, cause, err)
	requireAlive(t, otherCtx, "the other execution")
	require.False(t, b.w.Lost(context.Background(), exec, err), "an execution is cancelled once")
}

func TestWatch_UnfencedTableNoticeIsCheckedAgainstTheRow(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, kind string) {
		b := setup(t, kind, fixture.NoGeneration, noChecks)
		reclaimed, owned := b.start(t, 0), b.start(t, 0)
		ctx := b.watch(t, reclaimed)
		other := b.watch(t, owned)

		// A notice whose row still belongs to the execution cancels nothing.
		require.NoError(t, b.pub.Publish(context.Background(), watch.Notice{JobID: owned.JobID}))
		b.reclaim(t, true, reclaimed.JobID)
		cause, _ := cancelledWithin(t, ctx, time.Now(), time.Second)
		require.Equal(t, watch.ViaCheck, cause.Via)
		require.Equal(t, "FAILED", cause.Status)
		requireAlive(t, other, "the execution whose row is still PROCESSING")
	})
}

func TestPublisher_PostgresNoticeInTransactionArrivesOnCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres", fixture.Default, noChecks)
	ctx := context.Background()
	exec := b.start(t, 1)
	execCtx := b.watch(t, exec)

	rows, err := jobset.New(b.jobs.Guard).Snapshot(ctx, b.env.Pool, []string{exec.JobID})
	require.NoError(t, err)
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	changed, err := jobset.New(b.jobs.Guard).FailIfUnchanged(ctx, tx, []jobset.Job{rows[exec.JobID]}, "reclaimed")
	require.NoError(t, err)
	require.Len(t, changed.Failed, 1)
	require.NoError(t, b.pub.PublishOn(ctx, tx, watch.NoticesFrom(changed.Failed)...))

	time.Sleep(200 * time.Millisecond)
	requireAlive(t, execCtx, "the execution before the reclaim committed")
	require.NoError(t, tx.Commit(ctx))
	cause, _ := cancelledWithin(t, execCtx, time.Now(), time.Second)
	require.Equal(t, watch.ViaNotice, cause.Via)
}

func TestPublish_LargeBatchIsSplitAndEveryNoticeArrives(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, kind string) {
		b := setup(t, kind, fixture.Default, noChecks)
		const n = 400 // about 25 kB of notices: several NOTIFY payloads
		rows, err := b.env.Pool.Query(context.Background(),
			`INSERT INTO jobs (type, status, generation) SELECT 'chapter', 'PROCESSING', 1 FROM generate_series(1, $1) RETURNING id::text`, n)
		require.NoError(t, err)
		var ids []string
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		ctxs := make([]context.Context, n)
		for i, id := range ids {
			ctxs[i] = b.watch(t, jobguard.Execution{JobID: id, Generation: 1})
		}
		at := b.reclaim(t, true, ids...)
		var last time.Duration
		for _, ctx := range ctxs {
			cause, took := cancelledWithin(t, ctx, at, time.Second)
			require.Equal(t, watch.ViaNotice, cause.Via)
			last = max(last, took)
		}
		t.Logf("%s: %d executions cancelled within %v of the reclaim committing", kind, n, last)
		require.Zero(t, b.w.Len())
	})
}

func TestPublish_OversizedNoticeIsRefusedOthersSent(t *testing.T) {
	t.Parallel()
	// A text id column holds an id too long for any payload.
	b := setup(t, "postgres", fixture.TextID, noChecks)
	exec := b.start(t, 1)
	ctx := b.watch(t, exec)
	err := b.pub.Publish(context.Background(),
		watch.Notice{JobID: strings.Repeat("x", watch.PostgresPayloadMax), Generation: 1},
		watch.Notice{JobID: exec.JobID, Generation: 1})
	require.ErrorIs(t, err, watch.ErrNoticeTooLarge)
	cancelledWithin(t, ctx, time.Now(), time.Second)
}

func TestWatch_UnreadablePayloadTriggersCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, "redis", fixture.Default, noChecks)
	exec := b.start(t, 1)
	ctx := b.watch(t, exec)
	b.reclaim(t, false, exec.JobID)
	require.NoError(t, b.env.Redis.Publish(context.Background(), b.env.Prefix+":reclaim-notices", "not json").Err())
	cause, _ := cancelledWithin(t, ctx, time.Now(), time.Second)
	require.Equal(t, watch.ViaCheck, cause.Via)
	require.Contains(t, b.logs.String(), "unreadable notice")
}

func TestWatch_ReleaseForgetsExecution(t *testing.T) {
	t.Parallel()
	b := setup(t, "redis", fixture.Default, noChecks)
	exec := b.start(t, 1)
	ctx, release := b.w.Watch(context.Background(), exec)
	require.Equal(t, 1, b.w.Len())
	release()
	require.Zero(t, b.w.Len())
	require.ErrorIs(t, context.Cause(ctx), context.Canceled)
	require.NotErrorIs(t, context.Cause(ctx), jobguard.ErrJobTerminal)
	release() // a second call is harmless

	parent, cancel := context.WithCancel(context.Background())
	_, release = b.w.Watch(parent, exec)
	defer release()
	cancel()
	require.Eventually(t, func() bool { return b.w.Len() == 0 }, time.Second, time.Millisecond,
		"an execution whose parent context ended must be forgotten")
}

func TestRun_SecondConcurrentRunIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, "redis", fixture.Default, noChecks)
	require.ErrorContains(t, b.w.Run(context.Background()), "already running")
}

func TestNew_ErrorsNameTheField(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	valid := func() watch.Config {
		return watch.Config{Guard: jobs.Guard, DB: env.Pool, Transport: watch.Transport{Redis: env.Redis}}
	}
	for field, mutate := range map[string]func(*watch.Config){
		"Guard":                      func(c *watch.Config) { c.Guard = nil },
		"DB":                         func(c *watch.Config) { c.DB = nil },
		"neither Redis nor Postgres": func(c *watch.Config) { c.Transport.Redis = nil },
		"both Redis and Postgres":    func(c *watch.Config) { c.Transport.Postgres = env.Pool },
		"CheckInterval":              func(c *watch.Config) { c.CheckInterval = -time.Second },
		"PingInterval":               func(c *watch.Config) { c.PingInterval = -time.Second },
		"ReconnectMax 1ms is below":  func(c *watch.Config) { c.ReconnectMax = time.Millisecond },
		"ReconnectMin":               func(c *watch.Config) { c.ReconnectMin = -1 },
	} {
		cfg := valid()
		mutate(&cfg)
		_, err := watch.New(cfg)
		require.ErrorContains(t, err, field)
		require.True(t, strings.HasPrefix(err.Error(), "watch: new: "), err.Error())
	}
	_, err := watch.New(valid())
	require.NoError(t, err)
	_, err = watch.NewPublisher(jobs.Guard, watch.Transport{})
	require.ErrorContains(t, err, "neither Redis nor Postgres")
	_, err = watch.NewPublisher(nil, watch.Transport{Redis: env.Redis})
	require.ErrorContains(t, err, "guard is nil")
}

func TestWatch_EveryTableShape(t *testing.T) {
	t.Parallel()
	for _, v := range fixture.Variants {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "redis", v, noChecks)
			gen := int64(4)
			if !b.jobs.Guard.Fenced() {
				gen = 0
			}
			noticed, checked, owned := b.start(t, gen), b.start(t, gen), b.start(t, gen)
			noticedCtx, checkedCtx, ownedCtx := b.watch(t, noticed), b.watch(t, checked), b.watch(t, owned)

			at := b.reclaim(t, true, noticed.JobID)
			cause, _ := cancelledWithin(t, noticedCtx, at, time.Second)
			require.Equal(t, noticed.JobID, cause.JobID)
			if b.jobs.Guard.Fenced() {
				require.Equal(t, watch.ViaNotice, cause.Via)
			}

			b.reclaim(t, false, checked.JobID)
			n, err := b.w.Check(context.Background())
			require.NoError(t, err)
			require.Equal(t, 1, n)
			cause, _ = cancelledWithin(t, checkedCtx, time.Now(), time.Second)
			require.Equal(t, watch.ViaCheck, cause.Via)
			require.Equal(t, b.jobs.Table.Statuses.Failed, cause.Status)
			requireAlive(t, ownedCtx, "the execution that still owns its row")
		})
	}
}

// An execution that wrote its job's end itself (its own completion, or its
// own Fail with a reason of its own) has not lost anything: the periodic
// check must neither cancel it nor log it as reclaimed, while a real
// reclaim beside it is still caught by the same checks.
func TestCheck_ExecutionThatEndedItsOwnJobIsNotCancelled(t *testing.T) {
	t.Parallel()
	for _, v := range fixture.Variants {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			interval := 20 * time.Millisecond
			b := setup(t, "redis", v, watch.Config{CheckInterval: interval})
			ctx := context.Background()
			gen := int64(3)
			if !b.jobs.Guard.Fenced() {
				gen = 0
			}
			completed, failed, reclaimed := b.start(t, gen), b.start(t, gen), b.start(t, gen)
			completedCtx, failedCtx, reclaimedCtx := b.watch(t, completed), b.watch(t, failed), b.watch(t, reclaimed)

			require.NoError(t, b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, completed))
			require.NoError(t, b.jobs.Guard.Fail(ctx, b.env.Pool, failed, "encoder rejected the input"))
			at := b.reclaim(t, false, reclaimed.JobID)
			cause, _ := cancelledWithin(t, reclaimedCtx, at, time.Second)
			require.Equal(t, watch.ViaCheck, cause.Via)

			// Several more checks read the two ended rows.
			after := watch.Checks(b.w)
			require.Eventually(t, func() bool { return watch.Checks(b.w) >= after+3 }, 5*time.Second, time.Millisecond)
			requireAlive(t, completedCtx, "the execution that completed its own job")
			requireAlive(t, failedCtx, "the execution that failed its own job")
			logs := b.logs.String()
			require.NotContains(t, logs, "job_id="+completed.JobID)
			require.NotContains(t, logs, "job_id="+failed.JobID)
			require.Contains(t, logs, "job_id="+reclaimed.JobID)
			require.Zero(t, b.w.Len(), "an execution that ended its job needs no more watching")
		})
	}
}

// A worker that spells its job's uuid in upper case is still told by the
// reclaim's notice, which names the job as the id column prints it, as
// the cause does.
func TestWatch_NoticeFindsAnExecutionWhoseIDIsSpelledOtherwise(t *testing.T) {
	t.Parallel()
	b := setup(t, "redis", fixture.Default, noChecks)
	exec := b.start(t, 2)
	upper := jobguard.Execution{JobID: strings.ToUpper(exec.JobID), Generation: exec.Generation}
	ctx := b.watch(t, upper)

	at := b.reclaim(t, true, exec.JobID)
	cause, _ := cancelledWithin(t, ctx, at, time.Second)
	require.Equal(t, watch.ViaNotice, cause.Via)
	require.Equal(t, exec.JobID, cause.JobID, "the cause names the job by its canonical id")
	require.Zero(t, b.w.Len())
}

func TestPublisher_RedisCannotPublishInATransaction(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	pub, err := watch.NewPublisher(fixture.Create(t, env, fixture.Default).Guard, watch.Transport{Redis: env.Redis})
	require.NoError(t, err)
	tx, err := env.Pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	err = pub.PublishOn(context.Background(), tx, jobguard.Execution{JobID: "j", Generation: 1})
	require.ErrorIs(t, err, watch.ErrNotTransactional)
}

func TestReady_ClosesAtTheFirstSubscription(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	w, err := watch.New(watch.Config{Guard: jobs.Guard, DB: env.Pool, Transport: watch.Transport{Redis: env.Redis}})
	require.NoError(t, err)
	select {
	case <-w.Ready():
		t.Fatal("ready before Run subscribed")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-w.Ready():
		require.True(t, w.Subscribed())
	case <-time.After(10 * time.Second):
		t.Fatal("not ready after Run subscribed")
	}
}
