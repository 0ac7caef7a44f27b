package heartbeat_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

const interval = heartbeat.IntervalDefault

func TestBeat_ConcurrentBeatsOfOneJobWriteOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Config{MaxConns: 16})
	b := setupIn(t, env, fixture.Default)
	// The real clock: the calls really are concurrent in time.
	hb := heartbeat.New(b.jobs.Guard, heartbeat.Config{})
	id := b.jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
	exec := jobguard.Execution{JobID: id, Generation: 1}

	const calls = 1000
	start := make(chan struct{})
	results := make(chan heartbeat.Result, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			<-start
			res, err := hb.Beat(context.Background(), env.Pool, exec, heartbeat.Progress(i%101))
			if err != nil {
				t.Errorf("beat: %v", err)
			}
			results <- res
		})
	}
	close(start)
	wg.Wait()
	close(results)

	count := map[heartbeat.Result]int{}
	for r := range results {
		count[r]++
	}
	require.Equal(t, map[heartbeat.Result]int{heartbeat.Written: 1, heartbeat.Throttled: calls - 1}, count)
	require.Equal(t, 1, b.writes(t, id), "exactly one real row write")
	require.WithinDuration(t, time.Now(), b.jobs.Read(t, id).UpdatedAt, time.Minute)
}

func TestBeat_ThrottledInsideIntervalThenWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
	exec := jobguard.Execution{JobID: id, Generation: 1}

	res, err := b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(10))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	require.Equal(t, 10, b.progress(t, id))

	b.clock.Advance(interval - time.Nanosecond)
	res, err = b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(20))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Throttled, res)
	require.Equal(t, 1, b.writes(t, id))
	require.Equal(t, 10, b.progress(t, id), "a throttled beat saves nothing")

	b.clock.Advance(time.Nanosecond)
	res, err = b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(30))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	require.Equal(t, 2, b.writes(t, id))
	require.Equal(t, 30, b.progress(t, id))
}

func TestBeat_JobsAreLimitedSeparately(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	for range 3 {
		id := b.jobs.Insert(t, fixture.Job{Generation: 1})
		res, err := b.hb.Beat(ctx, b.env.Pool, jobguard.Execution{JobID: id, Generation: 1}, heartbeat.Poll("running"))
		require.NoError(t, err)
		require.Equal(t, heartbeat.Written, res)
		require.Equal(t, 1, b.writes(t, id))
	}
}

func TestBeat_FailedWriteConsumesSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}

	res, err := b.hb.Beat(ctx, closedPool(b.env), exec, heartbeat.Output(4096))
	require.Error(t, err)
	require.NotErrorIs(t, err, jobguard.ErrJobTerminal)
	require.Equal(t, heartbeat.Failed, res)

	res, err = b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Output(4096))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Throttled, res, "the failed write used up the interval")
	require.Zero(t, b.writes(t, id))

	b.clock.Advance(interval)
	res, err = b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Output(4096))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	require.Equal(t, 1, b.writes(t, id))
}

func TestBeat_CancelledWriteConsumesSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := b.hb.Beat(cancelled, b.env.Pool, exec, heartbeat.Progress(5))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, heartbeat.Failed, res)

	res, err = b.hb.Beat(context.Background(), b.env.Pool, exec, heartbeat.Progress(6))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Throttled, res)
	require.Zero(t, b.writes(t, id))
}

func TestBeat_ZeroRowsConsumesSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}

	res, err := b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(50))
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.True(t, jobguard.IsPermanent(err))
	require.Equal(t, heartbeat.Lost, res)

	// Even if the job could be written now, the interval is used up.
	b.env.Exec(`UPDATE jobs SET status = 'PROCESSING' WHERE id = $1`, id)
	before := b.writes(t, id)
	res, err = b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(50))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Throttled, res)
	require.Equal(t, before, b.writes(t, id))

	b.clock.Advance(interval)
	res, err = b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(50))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	require.Equal(t, before+1, b.writes(t, id))
}

func TestBeat_WritesOnEveryTableShape(t *testing.T) {
	t.Parallel()
	eachVariant(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		for _, ev := range []heartbeat.Evidence{heartbeat.Progress(42), heartbeat.Output(1), heartbeat.Poll("running")} {
			id := b.jobs.Insert(t, fixture.Job{Generation: 7, UpdatedAgo: time.Hour})
			before := b.jobs.Read(t, id)

			res, err := b.hb.Beat(ctx, b.env.Pool, jobguard.Execution{JobID: id, Generation: 7}, ev)
			require.NoError(t, err, ev.String())
			require.Equal(t, heartbeat.Written, res, ev.String())
			after := b.jobs.Read(t, id)
			require.True(t, after.UpdatedAt.After(before.UpdatedAt.Add(30*time.Minute)), "%s: updated_at must move", ev)
			require.Equal(t, before.Status, after.Status)
			require.Equal(t, 1, b.writes(t, id))
			if ev.Kind() == heartbeat.KindProgress && b.jobs.Table.ProgressColumn != "" {
				require.Equal(t, 42, b.progress(t, id))
			}
		}
	})
}

func TestBeat_StaleGenerationWritesNothing(t *testing.T) {
	t.Parallel()
	eachVariant(t, func(t *testing.T, b *bundle) {
		if !b.jobs.Guard.Fenced() {
			t.Skip("a table without a generation column is fenced by status only")
		}
		id := b.jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		before := b.jobs.Read(t, id)

		res, err := b.hb.Beat(context.Background(), b.env.Pool, jobguard.Execution{JobID: id, Generation: 1}, heartbeat.Progress(90))
		require.ErrorIs(t, err, jobguard.ErrJobTerminal)
		require.Equal(t, heartbeat.Lost, res)
		var se *jobguard.StateError
		require.ErrorAs(t, err, &se)
		require.Equal(t, jobguard.ReasonSuperseded, se.Reason)
		require.Equal(t, before, b.jobs.Read(t, id))
		require.Zero(t, b.writes(t, id))
	})
}

func TestBeat_FailedJobWritesNothing(t *testing.T) {
	t.Parallel()
	eachVariant(t, func(t *testing.T, b *bundle) {
		st := b.jobs.Table.Statuses
		id := b.jobs.Insert(t, fixture.Job{Status: st.Failed, Reason: jobguard.ReclaimedReasonDefault, Generation: 1, UpdatedAgo: time.Hour})
		before := b.jobs.Read(t, id)

		res, err := b.hb.Beat(context.Background(), b.env.Pool, jobguard.Execution{JobID: id, Generation: 1}, heartbeat.Output(1))
		require.ErrorIs(t, err, jobguard.ErrJobTerminal)
		require.Equal(t, heartbeat.Lost, res)
		var se *jobguard.StateError
		require.ErrorAs(t, err, &se)
		require.Equal(t, jobguard.ReasonStatus, se.Reason)
		require.Equal(t, st.Failed, se.Status)
		require.Equal(t, before, b.jobs.Read(t, id))
		require.Zero(t, b.writes(t, id))
	})
}

func TestBeat_RefusesNoEvidenceWithoutUsingSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}

	for _, ev := range []heartbeat.Evidence{{}, heartbeat.Output(0), heartbeat.Output(-3), heartbeat.Poll(""), heartbeat.Progress(-1), heartbeat.Progress(101)} {
		res, err := b.hb.Beat(ctx, b.env.Pool, exec, ev)
		require.ErrorIs(t, err, heartbeat.ErrNoEvidence, ev.String())
		require.Equal(t, heartbeat.Failed, res)
	}
	require.Zero(t, b.hb.Len())
	res, err := b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(100))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	require.Equal(t, 1, b.writes(t, id))
}

func TestBeat_OneWriteInFlightEvenPastInterval(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}

	// Hold the row lock so the first write hangs in the database.
	lock, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)

	first := make(chan heartbeat.Result, 1)
	go func() {
		res, err := b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(1))
		if err != nil {
			t.Errorf("first beat: %v", err)
		}
		first <- res
	}()
	// The slot is claimed (and the write marked in flight) before the write
	// is sent; the write cannot return while the row is locked.
	require.Eventually(t, func() bool { return b.hb.Len() == 1 }, 10*time.Second, time.Millisecond)

	// Two intervals pass and other jobs' beats drop the generations that
	// held the job's slot; its write is still in flight.
	other := closedPool(b.env)
	for range 2 {
		b.clock.Advance(interval)
		_, _ = b.hb.Beat(ctx, other, jobguard.Execution{JobID: uuid.NewString()}, heartbeat.Poll("running"))
	}
	// Were a second write sent, it would wait on the lock until this
	// deadline and come back Failed.
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := b.hb.Beat(waitCtx, b.env.Pool, exec, heartbeat.Progress(2))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Throttled, res, "a second write must not start while the first is in flight")

	require.NoError(t, lock.Commit(ctx))
	require.Equal(t, heartbeat.Written, <-first)
	require.Equal(t, 1, b.writes(t, id))

	// With the write returned, the next beat past the interval writes.
	b.clock.Advance(interval)
	res, err = b.hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(3))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	require.Equal(t, 2, b.writes(t, id))
}

func TestForget_NextExecutionWritesAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})

	res, err := b.hb.Beat(ctx, b.env.Pool, jobguard.Execution{JobID: id, Generation: 1}, heartbeat.Progress(10))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	require.Equal(t, 1, b.hb.Len())

	b.hb.Forget(id)
	require.Zero(t, b.hb.Len())
	res, err = b.hb.Beat(ctx, b.env.Pool, jobguard.Execution{JobID: id, Generation: 1}, heartbeat.Progress(20))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	require.Equal(t, 2, b.writes(t, id))
}

func TestLen_RotationKeepsSlotsClaimedWithinInterval(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	a := b.jobs.Insert(t, fixture.Job{Generation: 1})
	execA := jobguard.Execution{JobID: a, Generation: 1}
	beatOther := func() {
		id := b.jobs.Insert(t, fixture.Job{Generation: 1})
		res, err := b.hb.Beat(ctx, b.env.Pool, jobguard.Execution{JobID: id, Generation: 1}, heartbeat.Output(1))
		require.NoError(t, err)
		require.Equal(t, heartbeat.Written, res)
	}

	b.clock.Advance(interval * 6 / 10)
	res, err := b.hb.Beat(ctx, b.env.Pool, execA, heartbeat.Output(1))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)

	b.clock.Advance(interval * 4 / 10)
	beatOther() // rotates: a's slot moves to the older generation

	b.clock.Advance(interval * 5 / 10)
	res, err = b.hb.Beat(ctx, b.env.Pool, execA, heartbeat.Output(1))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Throttled, res, "a slot claimed less than an interval ago survives rotation")

	b.clock.Advance(interval / 10)
	res, err = b.hb.Beat(ctx, b.env.Pool, execA, heartbeat.Output(1))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	require.Equal(t, 2, b.writes(t, a))
}

func TestLen_JobsLeftAloneAreDropped(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	c := &clock{}
	hb := heartbeat.New(jobs.Guard, heartbeat.Config{Now: c.Now})
	ctx := context.Background()
	// The writes themselves do not matter here, only the slots they claim:
	// a closed pool fails each write at once, and a failed write still
	// claims its slot.
	db := closedPool(env)
	beat := func(id string) {
		// assert, not require: this runs on several goroutines.
		res, err := hb.Beat(ctx, db, jobguard.Execution{JobID: id, Generation: 1}, heartbeat.Poll("running"))
		assert.Equal(t, heartbeat.Failed, res)
		assert.Error(t, err)
	}

	const n = 100_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				beat(ids[i])
			}
		})
	}
	wg.Wait()
	require.Equal(t, n, hb.Len())
	// Within the interval they still throttle.
	res, err := hb.Beat(ctx, db, jobguard.Execution{JobID: ids[0], Generation: 1}, heartbeat.Poll("running"))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Throttled, res)

	// Beats of one job keep arriving; the jobs left alone fall away.
	live := uuid.NewString()
	c.Advance(interval)
	beat(live)
	require.LessOrEqual(t, hb.Len(), n+1)
	c.Advance(interval)
	beat(live)
	require.Equal(t, 1, hb.Len(), "only the job still beating is held")
	hb.Forget(live)
	require.Zero(t, hb.Len())
}

func TestNew_NonPositiveIntervalMeansDefault(t *testing.T) {
	t.Parallel()
	for _, iv := range []time.Duration{0, -time.Second} {
		b := setup(t, fixture.Default)
		hb := heartbeat.New(b.jobs.Guard, heartbeat.Config{Interval: iv, Now: b.clock.Now})
		ctx := context.Background()
		id := b.jobs.Insert(t, fixture.Job{Generation: 1})
		exec := jobguard.Execution{JobID: id, Generation: 1}
		res, err := hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(1))
		require.NoError(t, err)
		require.Equal(t, heartbeat.Written, res)

		b.clock.Advance(heartbeat.IntervalDefault - time.Nanosecond)
		res, _ = hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(2))
		require.Equal(t, heartbeat.Throttled, res, "interval %v", iv)
		b.clock.Advance(time.Nanosecond)
		res, _ = hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(3))
		require.Equal(t, heartbeat.Written, res, "interval %v", iv)
	}
}

func TestNew_NilGuardPanics(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "heartbeat: new: guard is nil", func() { heartbeat.New(nil, heartbeat.Config{}) })
}

func TestResult_String(t *testing.T) {
	t.Parallel()
	for r, want := range map[heartbeat.Result]string{
		heartbeat.Failed: "failed", heartbeat.Written: "written", heartbeat.Throttled: "throttled", heartbeat.Lost: "lost",
	} {
		require.Equal(t, want, r.String())
	}
}

// TestBeat_WriteAmplification fires 10,000 beats a second, spread over ten
// jobs, for ten simulated intervals and counts the rows really written:
// one per job per interval, however many calls arrive.
func TestBeat_WriteAmplification(t *testing.T) {
	t.Parallel()
	const (
		rate      = 10_000 // calls per simulated second, all jobs together
		nJobs     = 10
		iv        = time.Second // scaled down so the run stays short
		intervals = 10
	)
	b := setup(t, fixture.Default)
	hb := heartbeat.New(b.jobs.Guard, heartbeat.Config{Interval: iv, Now: b.clock.Now})
	ctx := context.Background()
	execs := make([]jobguard.Execution, nJobs)
	for i := range execs {
		execs[i] = jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	}

	calls, written := 0, 0
	for range rate * int(iv/time.Second) * intervals {
		res, err := hb.Beat(ctx, b.env.Pool, execs[calls%nJobs], heartbeat.Output(1))
		require.NoError(t, err)
		if res == heartbeat.Written {
			written++
		}
		calls++
		b.clock.Advance(time.Second / rate)
	}

	var rows int
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT count(*) FROM row_writes`).Scan(&rows))
	require.Equal(t, written, rows)
	require.Equal(t, nJobs*intervals, rows, "one write per job per interval")
	t.Logf("%d calls at %d/s over %d jobs for %d intervals: %d row writes = %.2f writes per job per interval, %d calls per write",
		calls, rate, nJobs, intervals, rows, float64(rows)/nJobs/intervals, calls/rows)
}

// TestBeat_LimitIsPerProcess shows the documented non-guarantee: two
// Heartbeats (as two worker processes would have) each write once.
func TestBeat_LimitIsPerProcess(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	other := heartbeat.New(b.jobs.Guard, heartbeat.Config{Now: b.clock.Now})

	for _, hb := range []*heartbeat.Heartbeat{b.hb, other, b.hb, other} {
		_, err := hb.Beat(ctx, b.env.Pool, exec, heartbeat.Progress(1))
		require.NoError(t, err)
	}
	require.Equal(t, 2, b.writes(t, id))
}

func TestBeat_IDSpelledTwoWaysIsOneSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})

	res, err := b.hb.Beat(ctx, b.env.Pool, jobguard.Execution{JobID: id, Generation: 1}, heartbeat.Progress(10))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, res)
	res, err = b.hb.Beat(ctx, b.env.Pool, jobguard.Execution{JobID: strings.ToUpper(id), Generation: 1}, heartbeat.Progress(20))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Throttled, res, "the same job, spelled in upper case")
	require.Equal(t, 1, b.writes(t, id))
}
