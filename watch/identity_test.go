package watch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// TestWatch_EverySpellingOfAnIDIsOneJob watches one execution of a job
// under every spelling of its id: the reclaim's notice (or, on a table
// without generations, the check it asks for) finds every one of them,
// Lost through any spelling finds them all, and every cause names the job
// by its canonical id.
func TestWatch_EverySpellingOfAnIDIsOneJob(t *testing.T) {
	t.Parallel()
	for _, v := range fixture.Variants {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "redis", v, noChecks)
			gen := int64(2)
			if !b.jobs.Guard.Fenced() {
				gen = 0
			}
			watchAll := func(id string) []context.Context {
				var ctxs []context.Context
				for _, sp := range b.jobs.Spellings(id) {
					ctxs = append(ctxs, b.watch(t, jobguard.Execution{JobID: sp.ID, Generation: gen}))
				}
				require.Equal(t, len(ctxs), b.w.Len())
				return ctxs
			}
			causes := func(ctxs []context.Context, id string, via watch.Via) {
				t.Helper()
				for i, ctx := range ctxs {
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Second):
						t.Fatalf("the execution watched as %q was not cancelled", b.jobs.Spellings(id)[i].ID)
					}
					var cause *watch.LostError
					require.ErrorAs(t, context.Cause(ctx), &cause)
					require.Equal(t, id, cause.JobID, "the cause names the job by its canonical id")
					require.Equal(t, via, cause.Via)
				}
				require.Zero(t, b.w.Len())
			}

			noticed := b.start(t, gen).JobID
			ctxs := watchAll(noticed)
			b.reclaim(t, true, noticed)
			via := watch.ViaNotice
			if !b.jobs.Guard.Fenced() {
				via = watch.ViaCheck
			}
			causes(ctxs, noticed, via)

			lost := b.start(t, gen).JobID
			ctxs = watchAll(lost)
			spellings := b.jobs.Spellings(lost)
			last := jobguard.Execution{JobID: spellings[len(spellings)-1].ID, Generation: gen}
			require.True(t, b.w.Lost(context.Background(), last, fmt.Errorf("heartbeat: %w", jobguard.ErrJobTerminal)))
			causes(ctxs, lost, watch.ViaHeartbeat)
		})
	}
}

// TestWatch_NoticeOfAnotherJobsTableCancelsNothing runs two jobs tables
// with integer ids on the same channel: a reclaim of export 42 must not
// cancel the execution of task 42.
func TestWatch_NoticeOfAnotherJobsTableCancelsNothing(t *testing.T) {
	t.Parallel()
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			ctx := context.Background()
			tasks, exports := intJobsTable(t, env, "tasks"), intJobsTable(t, env, "exports")
			env.Exec(`INSERT INTO tasks (id, status, generation) VALUES (42, 'PROCESSING', 1), (43, 'PROCESSING', 1)`)
			w, err := watch.New(watch.Config{Guard: tasks, DB: env.Pool, Transport: transportFor(env, kind), CheckInterval: time.Hour})
			require.NoError(t, err)
			run(t, w)
			waitSubscribed(t, w)
			require.Eventually(t, func() bool { return watch.Checks(w) > 0 }, 10*time.Second, time.Millisecond)
			task42, release42 := w.Watch(ctx, jobguard.Execution{JobID: "42", Generation: 1})
			defer release42()
			task43, release43 := w.Watch(ctx, jobguard.Execution{JobID: "43", Generation: 1})
			defer release43()

			exportsPub, err := watch.NewPublisher(exports, transportFor(env, kind))
			require.NoError(t, err)
			tasksPub, err := watch.NewPublisher(tasks, transportFor(env, kind))
			require.NoError(t, err)
			require.NoError(t, exportsPub.Publish(ctx, jobguard.Execution{JobID: "42", Generation: 1}))
			// A notice of task 43 after it: once it has arrived, so has
			// the one before it on the same channel.
			require.NoError(t, tasksPub.Publish(ctx, jobguard.Execution{JobID: "43", Generation: 1}))
			select {
			case <-task43.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("task 43's notice never arrived")
			}
			requireAlive(t, task42, "task 42's execution, after a notice of export 42")
		})
	}
}

// intJobsTable creates a jobs table with bigint ids under name and returns
// a guard over it with the test's shared settings, the same for every
// table of the test.
func intJobsTable(t *testing.T, env *testenv.Env, name string) *jobguard.Guard {
	t.Helper()
	env.Exec(fmt.Sprintf(`CREATE TABLE %s (
	    id bigint PRIMARY KEY,
	    status text NOT NULL,
	    generation bigint NOT NULL DEFAULT 0,
	    failure_reason text,
	    updated_at timestamptz NOT NULL DEFAULT now())`, name))
	g, err := jobguard.NewWithConfig(context.Background(), env.Pool, jobguard.Table{Name: name, GenerationColumn: "generation"},
		jobguard.GuardConfig{Shared: jobguard.Shared{Prefix: env.Prefix, NoticeChannel: env.Schema}})
	require.NoError(t, err)
	return g
}

// TestWatch_NoticeThatNamesNoTableIsChecked: a notice without its jobs
// table could be any table's, so the watcher checks its executions against
// their rows instead of cancelling by the notice.
func TestWatch_NoticeThatNamesNoTableIsChecked(t *testing.T) {
	t.Parallel()
	b := setup(t, "redis", fixture.Default, noChecks)
	exec := b.start(t, 3)
	ctx := b.watch(t, exec)
	at := b.reclaim(t, false, exec.JobID)
	payload := fmt.Sprintf(`[{"job_id":%q,"generation":3}]`, exec.JobID)
	require.NoError(t, b.env.Redis.Publish(context.Background(), b.jobs.Guard.Shared().Prefix+":reclaim-notices", payload).Err())
	cause, _ := cancelledWithin(t, ctx, at, 10*time.Second)
	require.Equal(t, watch.ViaCheck, cause.Via)
}
