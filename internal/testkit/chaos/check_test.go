package chaos_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/chaos"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// checkEnv is a schema with the run's tables and nothing run in it yet.
func checkEnv(t *testing.T) *testenv.Env {
	t.Helper()
	env := testenv.New(t)
	for _, sql := range []string{jobguard.Migration, lease.Migration, usage.Migration, settle.Migration, chaos.Schema} {
		env.Exec(sql)
	}
	return env
}

// write runs sql as actor at generation gen, the way the run's writers do.
func write(t *testing.T, env *testenv.Env, actor string, gen int64, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('chaos.actor', $1, true), set_config('chaos.writer_gen', $2, true)`, actor, strconv.FormatInt(gen, 10)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql, args...)
		return err
	}))
}

func invariants(vs []chaos.Violation) map[int][]string {
	out := map[int][]string{}
	for _, v := range vs {
		out[v.Invariant] = append(out[v.Invariant], v.What)
	}
	return out
}

func TestCheck_CleanHistoryHasNoViolations(t *testing.T) {
	t.Parallel()
	env := checkEnv(t)
	id := uuid.NewString()
	env.Exec(`INSERT INTO jobs (id, type, parent_id) VALUES ($1, 'chapter', 'course-1')`, id)
	env.Exec(`INSERT INTO courses (id) VALUES ('course-1')`)
	write(t, env, "start", 0, `UPDATE jobs SET status = 'PROCESSING', generation = generation + 1 WHERE id = $1`, id)
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('chaos.actor', 'worker', true), set_config('chaos.writer_gen', '1', true);
			UPDATE jobs SET status = 'COMPLETED' WHERE id = '`+id+`';
			INSERT INTO chapters (course_id, job_id, generation) SELECT 'course-1', '`+id+`', 1 FROM generate_series(1, 3);
			INSERT INTO lessons (chapter_id, job_id, generation) SELECT c.id, c.job_id, 1 FROM chapters c, generate_series(1, 2);
			UPDATE courses SET status = 'READY', weeks = 3 WHERE id = 'course-1'`)
		return err
	}))

	vs, err := chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{})
	require.NoError(t, err)
	require.Empty(t, vs)
}

func TestCheck_ReportsEachBrokenInvariant(t *testing.T) {
	t.Parallel()
	env := checkEnv(t)
	ctx := context.Background()
	failed, stale, lost := uuid.NewString(), uuid.NewString(), uuid.NewString()
	env.Exec(`INSERT INTO jobs (id, type, status, generation, failure_reason, parent_id) VALUES
		($1, 'chapter', 'FAILED', 2, 'reclaimed: exceeded runtime limit without progress', 'course-1'),
		($2, 'video', 'PROCESSING', 5, NULL, 'video-1'),
		($3, 'chapter', 'PROCESSING', 1, NULL, 'course-2')`, failed, stale, lost)
	env.Exec(`INSERT INTO courses (id) VALUES ('course-1'), ('course-2')`)
	env.Exec(`INSERT INTO videos (id, account) VALUES ('video-1', 'acct-0')`)

	// 1 (and 2): an unconditional completion brings a reclaimed job back,
	// with its chapters.
	write(t, env, "worker", 2, `UPDATE jobs SET status = 'COMPLETED' WHERE id = $1`, failed)
	write(t, env, "worker", 2, `UPDATE jobs SET status = 'FAILED' WHERE id = $1`, failed)
	env.Exec(`INSERT INTO chapters (course_id, job_id, generation) VALUES ('course-1', $1, 2)`, failed)
	// 3: usage billed without a confirmed finalize.
	env.Exec(`INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity)
		VALUES ('"' || current_schema() || '"."jobs"', $1, 'video_ms', 5, 'acct-0', 10)`, stale)
	// 4: a parent failed and a marker written for a reclaim that never happened.
	write(t, env, "reclaim", 0, `UPDATE courses SET status = 'FAILED' WHERE id = 'course-2'`)
	guard, err := jobguard.NewWithConfig(ctx, env.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: jobguard.Shared{Prefix: env.Prefix, Markers: jobguard.MarkersRedis}})
	require.NoError(t, err)
	markers, err := marker.NewRedisStore(guard, env.Redis, marker.Config{})
	require.NoError(t, err)
	require.NoError(t, markers.Write(ctx, marker.Marker{JobID: lost, Generation: 1, Reason: jobguard.ReclaimedReasonDefault, At: time.Now()}))
	// 5: a write by generation 4 of a job at generation 5.
	write(t, env, "worker", 4, `UPDATE jobs SET progress = 50 WHERE id = $1`, stale)

	vs, err := chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{})
	require.NoError(t, err)
	got := invariants(vs)
	for inv := 1; inv <= 5; inv++ {
		require.NotEmpty(t, got[inv], "invariant %d not reported; got %v", inv, got)
	}
	for _, v := range vs {
		require.NotEmpty(t, v.Rows, v.What)
	}
}

// whats lists the violations' descriptions.
func whats(vs []chaos.Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.What)
	}
	return out
}

// rescued writes a rescue of job, running at generation 1 under owner w1,
// whose lease expires in expiresIn (negative: it has expired), and its
// completion by another worker, w2, at generation 3.
func rescued(t *testing.T, env *testenv.Env, expiresIn time.Duration) {
	t.Helper()
	id := uuid.NewString()
	env.Exec(`INSERT INTO jobguard_workers (id, host, pid, expires_at) VALUES ('w1', 'h', 1, now() + $1::interval)`, expiresIn.String())
	env.Exec(`INSERT INTO jobs (id, type, status, generation, lease_id, parent_id) VALUES ($1, 'chapter', 'PROCESSING', 1, 'w1', 'course-1')`, id)
	env.Exec(`INSERT INTO courses (id) VALUES ('course-1')`)
	write(t, env, "rescue", 0, `UPDATE jobs SET status = 'QUEUED', generation = 2, lease_id = NULL, failure_reason = $2 WHERE id = $1`,
		id, jobguard.RescuedReasonDefault)
	write(t, env, "start", 0, `UPDATE jobs SET status = 'PROCESSING', generation = 3, lease_id = 'w2' WHERE id = $1`, id)
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('chaos.actor', 'worker', true), set_config('chaos.writer_gen', '3', true);
			UPDATE jobs SET status = 'COMPLETED' WHERE id = '`+id+`';
			INSERT INTO chapters (course_id, job_id, generation) SELECT 'course-1', '`+id+`', 3 FROM generate_series(1, 3);
			INSERT INTO lessons (chapter_id, job_id, generation) SELECT c.id, c.job_id, 3 FROM chapters c, generate_series(1, 2);
			UPDATE courses SET status = 'READY', weeks = 3 WHERE id = 'course-1'`)
		return err
	}))
}

// A rescue of a job whose worker the run killed, after its lease expired,
// completed on another worker, is clean; the same rescue while the lease
// was live, of a worker the run never touched, is caught twice: from the
// lease's expiry and from the run's own record.
func TestCheck_RescueWhileTheOwnersLeaseWasLiveIsCaught(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := checkEnv(t)
	rescued(t, env, -time.Second)
	env.Exec(`INSERT INTO kills (incarnation, mid_transaction) VALUES (1, false)`)
	vs, err := chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{Rescued: 1})
	require.NoError(t, err)
	require.Empty(t, vs)

	env = checkEnv(t)
	rescued(t, env, time.Hour)
	vs, err = chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{Rescued: 1})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		"a job rescued while its owner's lease was live (the lease's last expiry is after the rescue, on the database's clock)",
		"a job rescued from a worker the run neither killed nor stopped, and that never said it lost its lease",
	}, whats(vs))
}

// A cancelled execution whose completion went through, with its chapter,
// is caught as a completion after a cancel with no Retry between, as a
// write of the cancelled generation, and as a product row of a cancelled
// job.
func TestCheck_CancelledJobThatCompletedIsCaught(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := checkEnv(t)
	id := uuid.NewString()
	env.Exec(`INSERT INTO jobs (id, type, status, generation, parent_id) VALUES ($1, 'chapter', 'PROCESSING', 1, 'course-1')`, id)
	env.Exec(`INSERT INTO courses (id) VALUES ('course-1')`)
	write(t, env, "cancel", 0, `UPDATE jobs SET status = 'FAILED', generation = 2, failure_reason = $2 WHERE id = $1`,
		id, jobguard.CancelledReasonDefault+": by hand")
	write(t, env, "worker", 1, `UPDATE jobs SET status = 'COMPLETED' WHERE id = $1`, id)
	env.Exec(`INSERT INTO chapters (course_id, job_id, generation) VALUES ('course-1', $1, 2)`, id)

	vs, err := chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{})
	require.NoError(t, err)
	got := whats(vs)
	for _, what := range []string{
		"a cancelled job completed with no Retry between the cancel and the completion",
		"a write by a rescued or cancelled execution after its job was taken",
		"a product row or READY parent of a job whose last cancel no Retry reopened",
	} {
		require.Contains(t, got, what)
	}
}

func TestCheck_CompletedVideoMustBeBilledOnceEvenIfItsWorkerWasKilled(t *testing.T) {
	t.Parallel()
	env := checkEnv(t)
	ctx := context.Background()
	id := uuid.NewString()
	env.Exec(`INSERT INTO jobs (id, type, status, generation, parent_id) VALUES ($1, 'video', 'PROCESSING', 1, 'video-1')`, id)
	env.Exec(`INSERT INTO videos (id, account) VALUES ('video-1', 'acct-0')`)
	env.Exec(`INSERT INTO accounts (id) VALUES ('acct-0')`)
	// The completion committed with its record; the worker that wrote them
	// was killed before it billed.
	write(t, env, "worker", 1, `WITH r AS (INSERT INTO job_settlements (jobs_table, job_id, generation, pending)
		VALUES ('"' || current_schema() || '"."jobs"', $1, 1, '{asset,content}'))
		UPDATE jobs SET status = 'COMPLETED' WHERE id = $1::uuid`, id)
	env.Exec(`INSERT INTO kills (incarnation, mid_transaction) VALUES (3, false)`)

	vs, err := chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		"a finalize record still pending after the run settled",
		"a completed video finalize not billed exactly once, nor visibly given up (whether or not its worker was killed)",
	}, invariants(vs)[3], "%v", vs)
	require.Len(t, vs, 2)

	// Given up, visibly: not a violation, unless its updates could succeed.
	env.Exec(`UPDATE job_settlements SET state = 'given_up' WHERE job_id = $1`, id)
	vs, err = chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{})
	require.NoError(t, err)
	require.Equal(t, []string{"a finalize record given up although its updates could succeed"}, invariants(vs)[3])

	// Settled: confirmed, billed once, metadata caught up.
	env.Exec(`UPDATE job_settlements SET state = 'confirmed', pending = '{}' WHERE job_id = $1`, id)
	env.Exec(`INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity)
		VALUES ('"' || current_schema() || '"."jobs"', $1, 'video_ms', 1, 'acct-0', 10)`, id)
	env.Exec(`UPDATE accounts SET video_ms = 10 WHERE id = 'acct-0'`)
	vs, err = chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{})
	require.NoError(t, err)
	require.Equal(t, []string{"a confirmed finalize record whose metadata did not catch up"}, invariants(vs)[3])
	write(t, env, "worker", 1, `UPDATE videos SET status = 'READY', asset_ok = true WHERE id = 'video-1'`)
	env.Exec(`INSERT INTO contents (video_id, published) VALUES ('video-1', true)`)
	vs, err = chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{})
	require.NoError(t, err)
	require.Empty(t, vs)
}

func TestCheck_ReclaimsMustMatchReports(t *testing.T) {
	t.Parallel()
	env := checkEnv(t)
	vs, err := chaos.Check(context.Background(), env.Pool, env.Redis, env.Prefix, chaos.Reported{Reclaimed: 1})
	require.NoError(t, err)
	require.Len(t, vs, 1)
	require.Equal(t, 6, vs[0].Invariant)
}

func TestCheck_ReclaimedExecutionThatSavedMustHaveBeenRefused(t *testing.T) {
	t.Parallel()
	env := checkEnv(t)
	id := uuid.NewString()
	env.Exec(`INSERT INTO jobs (id, type, status, generation, parent_id) VALUES ($1, 'chapter', 'PROCESSING', 1, 'course-1')`, id)
	env.Exec(`INSERT INTO courses (id) VALUES ('course-1')`)
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('chaos.actor', 'reclaim', true);
			UPDATE jobs SET status = 'FAILED', failure_reason = 'reclaimed: exceeded runtime limit without progress' WHERE id = '`+id+`';
			UPDATE courses SET status = 'FAILED' WHERE id = 'course-1'`)
		return err
	}))
	env.Exec(`INSERT INTO events (kind, job_id, generation, incarnation) VALUES ('saving', $1, 1, 7)`, id)

	vs, err := chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{Reclaimed: 1, MarkerUnsure: map[string]bool{id: true}})
	require.NoError(t, err)
	require.Len(t, vs, 1, "%v", vs)
	require.Equal(t, 6, vs[0].Invariant)

	env.Exec(`INSERT INTO events (kind, job_id, generation, incarnation) VALUES ('late_rejected', $1, 1, 7)`, id)
	vs, err = chaos.Check(ctx, env.Pool, env.Redis, env.Prefix, chaos.Reported{Reclaimed: 1, MarkerUnsure: map[string]bool{id: true}})
	require.NoError(t, err)
	require.Empty(t, vs)
}

// reclaimOne fails a PROCESSING job at generation 1 as the reclaimer does,
// with its parent, and returns its id.
func reclaimOne(t *testing.T, env *testenv.Env) string {
	t.Helper()
	id := uuid.NewString()
	env.Exec(`INSERT INTO jobs (id, type, status, generation, parent_id) VALUES ($1, 'chapter', 'PROCESSING', 1, 'course-1')`, id)
	env.Exec(`INSERT INTO courses (id, status) VALUES ('course-1', 'GENERATING')`)
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('chaos.actor', 'reclaim', true);
			UPDATE jobs SET status = 'FAILED', failure_reason = 'reclaimed: exceeded runtime limit without progress' WHERE id = '`+id+`';
			UPDATE courses SET status = 'FAILED' WHERE id = 'course-1'`)
		return err
	}))
	return id
}

func TestCheck_PostgresOnlyReadsTheMarkerTable(t *testing.T) {
	t.Parallel()
	env := checkEnv(t)
	env.Exec(marker.Migration)
	id := reclaimOne(t, env)
	ctx := context.Background()
	check := func() map[int][]string {
		vs, err := chaos.Check(ctx, env.Pool, nil, env.Prefix, chaos.Reported{Reclaimed: 1})
		require.NoError(t, err)
		return invariants(vs)
	}
	require.Equal(t, map[int][]string{4: {"a reclaim whose marker is missing although its sweep reported no marker error"}}, check())

	key := `"` + env.Schema + `"."jobs"`
	env.Exec(`INSERT INTO job_reclaim_markers (jobs_table, job_id, generation, reason, reclaimed_at, expires_at)
		VALUES ($1, $2, 1, 'reclaimed', now(), now() + interval '1 day')`, key, id)
	require.Empty(t, check(), "the reclaim's marker, in the table")

	env.Exec(`INSERT INTO job_reclaim_markers (jobs_table, job_id, generation, reason, reclaimed_at, expires_at)
		VALUES ($1, $2, 3, 'reclaimed', now(), now() + interval '1 day')`, key, uuid.NewString())
	require.Equal(t, map[int][]string{4: {"a marker without a reclaim of its generation in the history"}}, check())
}

func TestCheck_ReclaimsBeyondReportsOnlyAfterAFailedSweep(t *testing.T) {
	t.Parallel()
	env := checkEnv(t)
	id := reclaimOne(t, env)
	unsure := map[string]bool{id: true}
	vs, err := chaos.Check(context.Background(), env.Pool, env.Redis, env.Prefix, chaos.Reported{MarkerUnsure: unsure})
	require.NoError(t, err)
	require.Equal(t, map[int][]string{6: {"reclaims in the history differ from the reclaimers' reports"}}, invariants(vs))
	// A sweep whose connection ended as it committed reclaimed and could
	// not report it.
	vs, err = chaos.Check(context.Background(), env.Pool, env.Redis, env.Prefix, chaos.Reported{SweepErrors: 1, MarkerUnsure: unsure})
	require.NoError(t, err)
	require.Empty(t, vs)
}

func TestCheck_CallCancelledWhileItsJobWasItsOwn(t *testing.T) {
	t.Parallel()
	env := checkEnv(t)
	id := uuid.NewString()
	env.Exec(`INSERT INTO jobs (id, type, parent_id) VALUES ($1, 'chapter', 'course-1')`, id)
	env.Exec(`INSERT INTO courses (id) VALUES ('course-1')`)
	write(t, env, "start", 0, `UPDATE jobs SET status = 'PROCESSING', generation = generation + 1 WHERE id = $1`, id)
	env.Exec(`INSERT INTO events (kind, job_id, generation, incarnation, detail) VALUES ('cancelled', $1, 1, 7, 'notice'),
		('cancelled', $1, 1, 7, 'check')`, id)
	vs, err := chaos.Check(context.Background(), env.Pool, env.Redis, env.Prefix, chaos.Reported{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		"a call cancelled by a notice although no reclaim, rescue or cancel took its generation or a later one",
		"a call cancelled by the watcher's check while its job was still its own",
		"a job still active after the queue drained",
	}, append(invariants(vs)[5], invariants(vs)[0]...))
}
