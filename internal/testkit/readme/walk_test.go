package readme_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// program is the newcomer's program, made of the README's blocks: the
// Prisma mapping, the quickstart's migrations, worker and reclaimer. What
// the README leaves to the application is here: the slow call (it hangs
// until its job has been reclaimed, then returns its result anyway), the
// save of its product rows, and the steps of the story.
const program = `package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
)

// The mapping (README, "Your own table").
%s

type course struct{ id string }

var (
	calling   = make(chan struct{}, 1)
	reclaimed = make(chan struct{})
)

// generateWeeks is the model call that hangs: it returns only after its
// job was reclaimed.
func generateWeeks(ctx context.Context, c course) ([]string, error) {
	select {
	case calling <- struct{}{}:
	default:
	}
	<-reclaimed
	return []string{"week 1", "week 2", "week 3"}, nil
}

func saveWeeks(ctx context.Context, tx pgx.Tx, c course, weeks []string) error {
	for _, w := range weeks {
		if _, err := tx.Exec(ctx, ` + "`" + `INSERT INTO "Week" ("courseId", title) VALUES ($1, $2)` + "`" + `, c.id, w); err != nil {
			return err
		}
	}
	return nil
}

// migrate is the quickstart's first block.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
%s
}

// work is the quickstart's worker.
func work(ctx context.Context, pool *pgxpool.Pool, jobID string, course course) error {
%s
}

// runReclaimer is the quickstart's reclaimer.
func runReclaimer(ctx context.Context, pool *pgxpool.Pool) error {
%s
}

func main() {
	if err := story(); err != nil {
		fmt.Println("FAIL:", err)
		os.Exit(1)
	}
}

func story() error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("JOBGUARD_WALK_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %%w", err)
	}
	jobID, c := os.Getenv("JOBGUARD_WALK_JOB_ID"), course{id: os.Getenv("JOBGUARD_WALK_COURSE_ID")}

	done := make(chan error, 1)
	go func() { done <- work(ctx, pool, jobID, c) }()
	select {
	case <-calling:
	case err := <-done:
		return fmt.Errorf("the worker returned before its call: %%v", err)
	}
	fmt.Println("started; the call hangs")
	time.Sleep(2500 * time.Millisecond) // past the limit and the no-progress window

	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- runReclaimer(rctx, pool) }()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var status string
		if err := pool.QueryRow(ctx, ` + "`" + `SELECT status::text FROM "CourseJob" WHERE id = $1` + "`" + `, jobID).Scan(&status); err != nil {
			return err
		}
		if status == "FAILED" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the reclaimer did not reclaim the job; it is %%s", status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-stopped; err != nil {
		return fmt.Errorf("reclaimer: %%w", err)
	}
	fmt.Println("reclaimed")

	close(reclaimed) // the call returns late
	err = <-done
	fmt.Println("late completion:", err)
	if !errors.Is(err, jobguard.ErrJobTerminal) {
		return fmt.Errorf("the late completion was not refused with ErrJobTerminal: %%v", err)
	}
	err = work(ctx, pool, jobID, c) // the queue delivers the job again
	fmt.Println("redelivery:", err)
	if !errors.Is(err, jobguard.ErrReclaimed) {
		return fmt.Errorf("the redelivery was not refused with ErrReclaimed: %%v", err)
	}
	return nil
}
`

// readmeBlock returns the one Go block of the README that contains every
// marker.
func readmeBlock(t *testing.T, markers ...string) string {
	t.Helper()
	var found []string
	for _, b := range blocks(t, "go") {
		all := true
		for _, m := range markers {
			all = all && strings.Contains(b, m)
		}
		if all {
			found = append(found, b)
		}
	}
	require.Len(t, found, 1, "README Go blocks with %q", markers)
	return found[0]
}

// replace replaces old in block, which must hold it.
func replace(t *testing.T, block, old, new string) string {
	t.Helper()
	require.Contains(t, block, old, "the README block changed:\n%s", block)
	return strings.ReplaceAll(block, old, new)
}

// dropLine removes the lines of block that contain s, which must hold it.
func dropLine(t *testing.T, block, s string) string {
	t.Helper()
	require.Contains(t, block, s, "the README block changed:\n%s", block)
	var keep []string
	for _, l := range strings.Split(block, "\n") {
		if !strings.Contains(l, s) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// A newcomer with a Prisma-style table reads only the README: creates the
// table and its indexes from its SQL, maps it, applies the quickstart's
// migrations (leaving jobguard.Migration out, as it says) with a short
// limit in its limits statement, runs its worker and its reclaimer with
// the mapping where they pass DefaultTable, and a job whose call hangs is
// reclaimed; the late completion is refused with ErrJobTerminal, the
// redelivery with ErrReclaimed, and neither writes anything.
func TestREADMEWalk_PrismaTableLateCompletionRefused(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	table, indexes := sqlBlocks(t)
	env.Exec(table)
	env.Exec(indexes[0])
	// The application's own: a product table, one job of a course, and an
	// audit of every write to the job's row.
	env.Exec(`CREATE TABLE "Week" ("courseId" text NOT NULL, title text NOT NULL)`)
	env.Exec(`CREATE TABLE job_writes (seq bigserial PRIMARY KEY, old_status text, new_status text,
		old_gen int, new_gen int, reason text)`)
	env.Exec(`CREATE FUNCTION audit_job() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
		INSERT INTO job_writes (old_status, new_status, old_gen, new_gen, reason)
		VALUES (OLD.status, NEW.status, OLD.generation, NEW.generation, NEW."failureReason");
		RETURN NEW; END $$`)
	env.Exec(`CREATE TRIGGER audit_job AFTER UPDATE ON "CourseJob" FOR EACH ROW EXECUTE FUNCTION audit_job()`)
	env.Exec(`INSERT INTO "CourseJob" (id, kind, "courseId", "updatedAt")
		VALUES ('cjob-walk-1', 'chapter', 'course-1', now() AT TIME ZONE 'UTC')`)

	mapping := readmeBlock(t, "var table = jobguard.Table{", `Name:                "CourseJob"`)
	migrate := readmeBlock(t, "reclaim.Migration,", "INSERT INTO job_type_limits")
	migrate = dropLine(t, migrate, "jobguard.Migration,")
	migrate = replace(t, migrate, `('chapter', interval '45 minutes')`, `('chapter', interval '1 second')`)
	worker := readmeBlock(t, "starts.Start(ctx, pool, jobID)", "generateWeeks(ctx, course)")
	worker = replace(t, worker, "jobguard.DefaultTable()", "table")
	reclaimer := readmeBlock(t, "reclaim.New(reclaim.Config{", "r.Run(ctx)")
	reclaimer = replace(t, reclaimer, "jobguard.DefaultTable()", "table")
	reclaimer = replace(t, reclaimer, "15 * time.Minute", "time.Second")

	dir, err := os.MkdirTemp(".", "_walk")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	src := fmt.Sprintf(program, mapping, migrate, worker, reclaimer)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	cmd := exec.Command("go", "run", "./"+filepath.ToSlash(dir))
	cmd.Env = append(os.Environ(), "JOBGUARD_WALK_DATABASE_URL="+env.DatabaseURL,
		"JOBGUARD_WALK_JOB_ID=cjob-walk-1", "JOBGUARD_WALK_COURSE_ID=course-1")
	out, err := cmd.CombinedOutput()
	t.Logf("the README's program said:\n%s", out)
	require.NoError(t, err, "the program made of the README's blocks:\n%s", src)

	ctx := context.Background()
	var writes []string
	rows, err := env.Pool.Query(ctx, `SELECT format('%s→%s gen %s→%s %s', old_status, new_status, old_gen, new_gen,
		coalesce(reason, '')) FROM job_writes ORDER BY seq`)
	require.NoError(t, err)
	for rows.Next() {
		var w string
		require.NoError(t, rows.Scan(&w))
		writes = append(writes, w)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"QUEUED→PROCESSING gen 0→1 ",
		"PROCESSING→FAILED gen 1→1 reclaimed: exceeded runtime limit without progress",
	}, writes, "the job's row was written by its start and its reclaim, and by nothing after")
	var weeks, markers int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM "Week"),
		(SELECT count(*) FROM job_reclaim_markers WHERE job_id = 'cjob-walk-1' AND generation = 1)`).Scan(&weeks, &markers))
	require.Zero(t, weeks, "the refused completion saved no week")
	require.Equal(t, 1, markers, "the reclaim left its marker in the marker table")
}
