package reclaim_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/reclaim"
)

// Several types each have one job whose parent a worker transaction holds.
// Each worker lets its row go a while after the sweep starts waiting for
// it, well within the wait the sweep allows one lock, so that every one of
// them is waited out in turn. The waits of a sweep are bounded all
// together, by LivenessTimeout and half of SweepTimeout: the sweep must
// stop waiting once that is spent, and the job of a type without a rule
// must commit.
//
// What is checked is a count, not a speed: a budget of 3s holds at most
// two waits of 1.5s, however slow the machine (a slower one waits longer,
// never less), so at least four rules fail at once for the budget spent.
// Waits bounded one by one, not all together, would let every rule wait
// its parent out and none fail. The deadline is generous, so that a loaded
// machine's slow statements do not end the sweep first.
func TestSweep_SuccessiveHeldParentsShareOneWaitBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	courses(t, env)

	const types = 6
	const liveness, deadline = 3 * time.Second, testenv.Patience // a budget of 3s for all waits
	const hold = 1500 * time.Millisecond                         // each wait: half the budget
	limits := reclaim.StaticLimits{"video": 30 * time.Minute}
	rules := map[string]reclaim.ParentRule{}
	var heldCourses []string
	for i := range types {
		typ := fmt.Sprintf("t%d", i)
		c := "course-" + typ
		env.Exec(`INSERT INTO courses (id, status) VALUES ($1, 'GENERATING')`, c)
		heldCourses = append(heldCourses, c)
		jobs.Insert(t, fixture.Job{Type: typ, Generation: 1, ParentID: c, UpdatedAgo: 2 * time.Hour})
		limits[typ] = 30 * time.Minute
		rules[typ] = failCourse(t)
	}
	free := jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
	// Waiting for every held parent in turn is longer than the budget.
	require.Greater(t, time.Duration(types)*hold, min(liveness, deadline/2))

	holders := env.Connect(testenv.Config{MaxConns: types})
	watcher := env.Connect(testenv.Config{MaxConns: 1})
	type holder struct {
		tx  pgx.Tx
		pid int
	}
	var hs []holder
	for _, c := range heldCourses {
		tx, err := holders.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT 1 FROM courses WHERE id = $1 FOR UPDATE`, c)
		require.NoError(t, err)
		var pid int
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		hs = append(hs, holder{tx, pid})
	}

	// Each worker, in the order the rules run, lets its parent go hold
	// after a backend starts waiting for it.
	stop, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, h := range hs {
			for {
				var waiting bool
				err := watcher.QueryRow(stop,
					`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, h.pid).Scan(&waiting)
				if err != nil {
					return
				}
				if waiting {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			select {
			case <-stop.Done():
				return
			case <-time.After(hold):
			}
			_ = h.tx.Rollback(ctx)
		}
	}()

	r, logs := newReclaimer(t, jobs, reclaim.Config{
		Limits: limits, OnReclaim: rules,
		LivenessTimeout: liveness, SweepTimeout: deadline,
	})
	start := time.Now()
	rep, err := r.Sweep(ctx)
	took := time.Since(start)
	cancel()
	wg.Wait()
	t.Logf("took %v, report %+v, err %v", took, rep, err)
	require.NoError(t, err, "logs:\n%s", logs)
	require.GreaterOrEqual(t, rep.RuleErrors, types-2, "once the budget is spent, a held parent fails its rule at once")
	require.Contains(t, rep.ReclaimedIDs, free, "the job of a type without a rule commits")
	require.Equal(t, "FAILED", jobs.Read(t, free).Status)
}

// A parent rule blocks in the database without waiting for any lock (a
// slow trigger, a long statement: here pg_sleep), and returns when its
// context ends, as a rule must. It fails its own jobs; the job of a type
// without a rule is reclaimed in the same sweep, within its deadline.
func TestSweep_RuleThatBlocksWithoutALockFailsOnlyItsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	slow := jobs.Insert(t, fixture.Job{Type: "slow", Generation: 1, UpdatedAgo: 2 * time.Hour})
	free := jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
	sleep := func(ctx context.Context, tx pgx.Tx, _ []jobset.Job) error {
		_, err := tx.Exec(ctx, `SELECT pg_sleep(60)`)
		return err
	}
	r, logs := newReclaimer(t, jobs, reclaim.Config{
		Limits:          reclaim.StaticLimits{"slow": 30 * time.Minute, "video": 30 * time.Minute},
		OnReclaim:       map[string]reclaim.ParentRule{"slow": sleep},
		LivenessTimeout: time.Second, SweepTimeout: 4 * time.Second,
	})
	rep, err := r.Sweep(ctx)
	t.Logf("report %+v, err %v", rep, err)
	require.NoError(t, err, "logs:\n%s", logs)
	require.Equal(t, []string{free}, rep.ReclaimedIDs)
	require.Equal(t, 1, rep.RuleErrors)
	require.Equal(t, "FAILED", jobs.Read(t, free).Status)
	require.Equal(t, "PROCESSING", jobs.Read(t, slow).Status)
}

// A parent rule writes a best-effort row and goes on when that statement
// fails, returning nil: its failed statement has aborted the savepoint it
// ran in. Its jobs are what it failed; the job of a type without a rule is
// reclaimed in the same sweep, at this sweep and every later one.
func TestSweep_RuleThatSwallowsAFailedStatementFailsOnlyItsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	audited := jobs.Insert(t, fixture.Job{Type: "audited", Generation: 1, UpdatedAgo: 2 * time.Hour})
	free := jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
	var swallowed error
	bestEffort := func(ctx context.Context, tx pgx.Tx, _ []jobset.Job) error {
		_, swallowed = tx.Exec(ctx, `INSERT INTO no_such_audit_table (note) VALUES ('reclaimed')`)
		return nil // the audit row is optional
	}
	r, logs := newReclaimer(t, jobs, reclaim.Config{
		Limits:    reclaim.StaticLimits{"audited": 30 * time.Minute, "video": 30 * time.Minute},
		OnReclaim: map[string]reclaim.ParentRule{"audited": bestEffort},
	})
	for range 2 {
		rep, err := r.Sweep(ctx)
		t.Logf("report %+v, err %v", rep, err)
		require.Error(t, swallowed)
		require.NoError(t, err, "logs:\n%s", logs)
		if len(rep.ReclaimedIDs) > 0 {
			require.Equal(t, []string{free}, rep.ReclaimedIDs)
			break
		}
	}
	require.Equal(t, "FAILED", jobs.Read(t, free).Status)
	require.Equal(t, "PROCESSING", jobs.Read(t, audited).Status)
}

// Set stores a limit in whole microseconds, never shorter than asked, and
// it reads back as it was: also a limit of more than 2⁵³ microseconds
// (about 285 years), which a float cannot hold to the microsecond.
func TestTableLimits_SetNeverStoresALongLimitShorter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(reclaim.Migration)
	limits, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool})
	require.NoError(t, err)
	for _, us := range []int64{1<<53 + 1, 1<<53 + 3, int64(reclaim.LimitMax/time.Microsecond) - 2} {
		set := time.Duration(us) * time.Microsecond
		require.NoError(t, limits.Set(ctx, "chapter", set))
		got, err := limits.Limits(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, got["chapter"], set, "set %v (%d µs), read %v", set, us, got["chapter"])
		require.Equal(t, set, got["chapter"], "set %d µs, read %d µs", us, got["chapter"]/time.Microsecond)
	}
}
