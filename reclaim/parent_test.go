package reclaim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// One parent row refuses every write (a trigger raises). Its job stays for
// the next sweep; every other job is reclaimed with its parent.
func TestSweep_PoisonedParentStopsOnlyItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	courses(t, env, "poison", "course-a", "course-b")
	env.Exec(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'course % is archived', OLD.id;
END $$`)
	env.Exec(`CREATE TRIGGER refuse BEFORE UPDATE ON courses FOR EACH ROW WHEN (OLD.id = 'poison') EXECUTE FUNCTION refuse()`)
	poisoned := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "poison", UpdatedAgo: 2 * time.Hour})
	a := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "course-a", UpdatedAgo: 2 * time.Hour})
	b := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "course-b", UpdatedAgo: 2 * time.Hour})
	video := jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
	r, logs := newReclaimer(t, jobs, reclaim.Config{
		Limits:    reclaim.StaticLimits{"chapter": 30 * time.Minute, "video": time.Hour},
		OnReclaim: map[string]reclaim.ParentRule{"chapter": failCourse(t)},
	})

	rep, err := r.Sweep(ctx)
	require.NoError(t, err, "one poisoned parent does not fail the sweep")
	require.ElementsMatch(t, []string{a, b, video}, rep.ReclaimedIDs)
	require.Equal(t, 1, rep.RuleErrors)
	for _, id := range []string{a, b, video} {
		require.Equal(t, "FAILED", jobs.Read(t, id).Status)
	}
	for _, c := range []string{"course-a", "course-b"} {
		status, _, _ := courseStatus(t, env, c)
		require.Equal(t, "FAILED", status)
	}
	require.Equal(t, "PROCESSING", jobs.Read(t, poisoned).Status, "not failed without its parent")
	require.False(t, hasMarker(t, jobs, poisoned))
	require.Contains(t, logs.String(), "archived")

	// The refusal lifts; the next sweep reclaims the job it skipped.
	env.Exec(`DROP TRIGGER refuse ON courses`)
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{poisoned}, rep.ReclaimedIDs)
	status, _, _ := courseStatus(t, env, "poison")
	require.Equal(t, "FAILED", status)
}

// Another chapter of the course finished and made it READY. Reclaiming a
// stuck chapter of the same course must not turn it FAILED: a parent rule
// moves a parent only from the state it expects.
func TestSetParent_LeavesAParentThatMovedOn(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	courses(t, env, "course-1")
	env.Exec(`UPDATE courses SET status = 'READY'`) // another chapter finished it
	id := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "course-1", UpdatedAgo: 2 * time.Hour})
	r, _ := newReclaimer(t, jobs, reclaim.Config{OnReclaim: map[string]reclaim.ParentRule{"chapter": failCourse(t)}})

	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{id}, rep.ReclaimedIDs)
	status, _, _ := courseStatus(t, env, "course-1")
	require.Equal(t, "READY", status)
}

// A worker transaction holds one parent row and sits idle. A parent rule
// does not wait for it past LivenessTimeout: its job waits for the next
// sweep, counted as a rule error, and every other job is reclaimed in the
// same sweep, long before the sweep's deadline.
func TestSweep_LockedParentHoldsBackOnlyItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	courses(t, env, "held", "course-a", "course-b")
	held := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "held", UpdatedAgo: 2 * time.Hour})
	a := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "course-a", UpdatedAgo: 2 * time.Hour})
	b := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "course-b", UpdatedAgo: 2 * time.Hour})

	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM courses WHERE id = 'held' FOR UPDATE`)
	require.NoError(t, err)

	r, _ := newReclaimer(t, jobs, reclaim.Config{
		OnReclaim:       map[string]reclaim.ParentRule{"chapter": failCourse(t)},
		LivenessTimeout: 300 * time.Millisecond, SweepTimeout: 20 * time.Second,
	})
	start := time.Now()
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 10*time.Second, "the sweep did not wait out its deadline")
	require.ElementsMatch(t, []string{a, b}, rep.ReclaimedIDs)
	require.Equal(t, 1, rep.RuleErrors)
	require.Equal(t, "PROCESSING", jobs.Read(t, held).Status, "not failed without its parent")

	// The worker commits; the next sweep reclaims the job it skipped.
	require.NoError(t, tx.Rollback(ctx))
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{held}, rep.ReclaimedIDs)
}

// Idle worker transactions hold the parents of several jobs of two types,
// so many that waiting LivenessTimeout for each would outlast the sweep's
// deadline. The sweep still commits, within its deadline, every job whose
// parent is free and every job whose type has no rule; the held ones are
// counted as rule errors and left for the next sweep, which reclaims them
// once their parents are free.
func TestSweep_ManyHeldParentsNeverStallTheFreeOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	const heldChapters, heldExports = 6, 2
	var heldIDs, freeIDs []string
	var heldCourses []string
	courses(t, env)
	course := func(id string) string {
		env.Exec(`INSERT INTO courses (id, status, export_status) VALUES ($1, 'GENERATING', 'EXPORTING')`, id)
		return id
	}
	for i := range heldChapters {
		c := course(fmt.Sprintf("held-chapter-%d", i))
		heldCourses = append(heldCourses, c)
		heldIDs = append(heldIDs, jobs.Insert(t, fixture.Job{Generation: 1, ParentID: c, UpdatedAgo: 2 * time.Hour}))
	}
	for i := range heldExports {
		c := course(fmt.Sprintf("held-export-%d", i))
		heldCourses = append(heldCourses, c)
		heldIDs = append(heldIDs, jobs.Insert(t, fixture.Job{Type: "export", Generation: 1, ParentID: c, UpdatedAgo: 2 * time.Hour}))
	}
	for i := range 3 {
		c := course(fmt.Sprintf("free-%d", i))
		freeIDs = append(freeIDs,
			jobs.Insert(t, fixture.Job{Generation: 1, ParentID: c, UpdatedAgo: 2 * time.Hour}),
			jobs.Insert(t, fixture.Job{Type: "export", Generation: 1, ParentID: c, UpdatedAgo: 2 * time.Hour}))
	}
	for range 2 { // no rule for videos
		freeIDs = append(freeIDs, jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour}))
	}

	// Each held parent is held by an idle transaction of its own
	// connection, as a worker between two statements holds it.
	holders := env.Connect(testenv.Config{MaxConns: int32(len(heldCourses))})
	var txs []pgx.Tx
	for _, c := range heldCourses {
		tx, err := holders.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT 1 FROM courses WHERE id = $1 FOR UPDATE`, c)
		require.NoError(t, err)
		txs = append(txs, tx)
	}

	exportRule, err := reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Column: "export_status", Value: "FAILED", From: []string{"EXPORTING"}})
	require.NoError(t, err)
	const liveness, deadline = 2 * time.Second, 10 * time.Second
	// Waiting LivenessTimeout per held parent would take longer than the
	// deadline: the sweep must not wait each one out.
	require.Greater(t, time.Duration(len(heldCourses))*liveness, deadline)
	r, logs := newReclaimer(t, jobs, reclaim.Config{
		Limits:          reclaim.StaticLimits{"chapter": 30 * time.Minute, "export": 30 * time.Minute, "video": time.Hour},
		OnReclaim:       map[string]reclaim.ParentRule{"chapter": failCourse(t), "export": exportRule},
		LivenessTimeout: liveness, SweepTimeout: deadline,
	})

	start := time.Now()
	rep, err := r.Sweep(ctx)
	took := time.Since(start)
	require.NoError(t, err, "logs:\n%s", logs)
	require.Less(t, took, deadline)
	require.ElementsMatch(t, freeIDs, rep.ReclaimedIDs)
	require.Equal(t, len(heldIDs), rep.RuleErrors)
	for _, id := range freeIDs {
		require.Equal(t, "FAILED", jobs.Read(t, id).Status)
	}
	for _, id := range heldIDs {
		require.Equal(t, "PROCESSING", jobs.Read(t, id).Status, "not failed without its parent")
		require.False(t, hasMarker(t, jobs, id))
	}
	for i := range 3 {
		status, export, _ := courseStatus(t, env, fmt.Sprintf("free-%d", i))
		require.Equal(t, "FAILED", status)
		require.Equal(t, "FAILED", *export)
	}

	// The workers finish; the next sweep reclaims what this one left.
	for _, tx := range txs {
		require.NoError(t, tx.Rollback(ctx))
	}
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, heldIDs, rep.ReclaimedIDs)
	require.Zero(t, rep.RuleErrors)
}
