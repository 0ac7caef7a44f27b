// Command demo tells jobguard's story end to end against a real PostgreSQL
// and Redis, in a few seconds:
//
//  1. two chapter jobs whose model calls hang past their limit are
//     reclaimed in one sweep. The worker with the watcher has its call
//     cancelled by the reclaim's notice at once; the worker without it
//     (as with -notices off) sees its call return, and its save is refused
//     before any chapter row is written, so the course never becomes READY;
//  2. a slow video encode survives the same sweep, because its heartbeat
//     shows progress; it finalizes and its usage is accrued once;
//  3. a video job reclaimed mid-encode: the notice cancels its stalled mux,
//     so no finalize, no READY and no usage, and its file is compensated;
//  4. the queue redelivers the reclaimed job: the start guard refuses it as
//     non-retryable;
//  5. an operator retries it: it runs and completes;
//  6. a worker process is killed (SIGKILL) right after its video job's
//     completion committed: the settle sweep finishes its metadata and
//     bills it exactly once.
//
// It ends with the final rows and one line per invariant of the design,
// each computed from the database, and exits non-zero if any did not hold.
//
// Usage:
//
//	go run ./examples/demo [-keep] [-v]
//
// The servers are found like the tests find them: JOBGUARD_DATABASE_URL and
// JOBGUARD_REDIS_URL, else 127.0.0.1:5432 (database test) and
// 127.0.0.1:6379, else containers where Docker answers.
//
// The demo wires the library where it can be read: open connects
// (flow.Connect: the pool, Redis, the migrations) and wire (wire.go)
// builds a worker's parts, the guard, the start guard, the heartbeat, the
// artifacts, the settler and the watcher, which the scenes hand to the
// processors; setup builds the reclaimer whose sweeps the scenes run. The
// worker process of scene 6 is wired by the same function.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/internal/testkit/endpoint"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/watch"
)

func main() {
	runWorkerIfAsked() // a worker process of scene 6
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// The demo's short limits, so the whole story takes seconds.
const (
	limit      = time.Second            // max runtime of every job type
	noProgress = time.Second            // no-progress threshold of the reclaimer
	beatEvery  = 100 * time.Millisecond // heartbeat interval
	stepDelay  = 50 * time.Millisecond  // one encoder chunk
	overLimit  = limit + 500*time.Millisecond
)

// demo is one run: its connections, worker, reclaimer, log and the
// refusals its callers saw.
type demo struct {
	tl    *timeline
	conns *flow.Conns
	w     *worker
	rec   *reclaim.Reclaimer
	logs  *logStore
	log   *slog.Logger
	// retried is the job of scenes 3 to 5.
	retried string
	// urls reach the servers, for the worker process of scene 6.
	urls struct{ database, redis string }

	mu      sync.Mutex
	reports []reclaim.Report
	// refusals are the errors the worker got back, by job id.
	refusals map[string][]error
}

// run is the whole demo; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keep := fs.Bool("keep", false, "keep the demo's schema, Redis keys and files for inspection")
	verbose := fs.Bool("v", false, "print the libraries' debug logs too (heartbeat writes, kept artifacts)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	d, closeDemo, err := open(ctx, stdout, *verbose)
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 2
	}
	defer closeDemo(*keep)
	if err := d.story(ctx); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 2
	}
	held, err := d.invariants(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 2
	}
	switch {
	case !held:
		d.tl.say("\nAn invariant did not hold.")
		return 1
	case d.tl.unexpected > 0:
		d.tl.say("\n%d step(s) of the story did not go as expected.", d.tl.unexpected)
		return 1
	}
	d.tl.say("\nEvery invariant held.")
	return 0
}

// open finds the servers, creates the demo's schema, Redis prefix and file
// directory, and returns the demo with the function that removes them all
// (unless keep) and closes the connections.
func open(ctx context.Context, out io.Writer, verbose bool) (*demo, func(keep bool), error) {
	tl := &timeline{out: out, start: time.Now()}
	tl.say("jobguard demo: a reclaimed job can change nothing and its work is cancelled; a slow one is left alone; a killed worker's job is billed once")
	ep, err := endpoint.Resolve(ctx, func(format string, args ...any) { tl.say("  "+format, args...) })
	if err != nil {
		return nil, nil, err
	}
	suffix := randomHex(4)
	schema, prefix := "jobguard_demo_"+suffix, "jobguard-demo:"+suffix
	files, err := os.MkdirTemp("", "jobguard-demo-")
	if err != nil {
		_ = ep.Close(ctx)
		return nil, nil, err
	}
	store := &logStore{}
	logger := slog.New(&recorder{store: store, tl: tl, verbose: verbose})
	cfg := flow.Config{DatabaseURL: ep.DatabaseURL, RedisURL: ep.RedisURL, Schema: schema, Prefix: prefix}
	conns, err := flow.Connect(ctx, cfg)
	if err != nil {
		_ = os.RemoveAll(files)
		_ = ep.Close(ctx)
		return nil, nil, err
	}
	w, err := wire(ctx, conns, cfg, files, logger, nil)
	if err != nil {
		conns.Close()
		_ = os.RemoveAll(files)
		_ = ep.Close(ctx)
		return nil, nil, err
	}
	tl.say("  schema %s, Redis prefix %s", schema, prefix)
	closeDemo := func(keep bool) {
		ctx := context.WithoutCancel(ctx)
		if keep {
			tl.say("\nkept: schema %s, Redis keys %s:*, files in %s", schema, prefix, files)
		} else {
			cleanup(ctx, conns, prefix, files)
		}
		conns.Close()
		_ = ep.Close(ctx)
	}
	d := &demo{tl: tl, conns: conns, w: w, logs: store, log: logger, refusals: map[string][]error{}}
	d.urls.database, d.urls.redis = ep.DatabaseURL, ep.RedisURL
	return d, closeDemo, nil
}

// story plays the six scenes and prints the final rows.
func (d *demo) story(ctx context.Context) error {
	d.tl.say("  limits: every job type %v of runtime; reclaimed only after %v without progress; heartbeat at most every %v",
		limit, noProgress, beatEvery)
	if err := d.setup(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	d.tl.start = time.Now()
	for _, scene := range []func(context.Context) error{d.hungChapterAndSlowVideo, d.reclaimedMidEncode, d.redelivered,
		d.operatorRetry, d.killedAfterCompletion} {
		if err := scene(ctx); err != nil {
			return err
		}
	}
	if err := d.finalRows(ctx); err != nil {
		return fmt.Errorf("final rows: %w", err)
	}
	return nil
}

// setup writes the limits, the product rows and the audit trigger the
// invariants read, and builds the reclaimer: over the jobs table, with the
// examples' parent rules, announcing each reclaim to the watcher.
func (d *demo) setup(ctx context.Context) error {
	pool := d.conns.Pool
	for _, typ := range []string{flow.TypeChapter, flow.TypeVideo, flow.TypeExport} {
		if err := flow.SetLimit(ctx, pool, typ, limit); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, auditSQL); err != nil {
		return fmt.Errorf("audit trigger: %w", err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO courses (id, title) VALUES ('course-1', 'Distributed Systems'), ('course-2', 'Databases'),
			('course-3', 'Operating Systems');
		INSERT INTO accounts (id) VALUES ('acct-1');
		INSERT INTO videos (id, account_id, title) VALUES
			('video-1', 'acct-1', 'Lecture 1: clocks'),
			('video-2', 'acct-1', 'Lecture 2: consensus'),
			('video-3', 'acct-1', 'Lecture 3: replication');`); err != nil {
		return fmt.Errorf("product rows: %w", err)
	}
	rules, err := flow.ParentRules()
	if err != nil {
		return err
	}
	rc := reclaim.Config{Guard: d.w.guard, DB: pool, Redis: d.conns.Redis, OnReclaim: rules,
		NoProgress: noProgress, Logger: d.log}
	if transport, notices := d.conns.Transport(); notices {
		if rc.Notices, err = watch.NewPublisher(d.w.guard, transport); err != nil {
			return err
		}
	}
	d.rec, err = reclaim.New(rc)
	return err
}

// auditSQL records every status or generation change of a job, so that the
// invariants can be checked against what really happened to each row.
const auditSQL = `
CREATE TABLE job_transitions (
    seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         uuid   NOT NULL,
    old_status     text,
    new_status     text   NOT NULL,
    old_generation bigint,
    new_generation bigint NOT NULL,
    failure_reason text,
    at             timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION record_job_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_transitions (job_id, new_status, new_generation, failure_reason)
        VALUES (NEW.id, NEW.status, NEW.generation, NEW.failure_reason);
    ELSIF OLD.status IS DISTINCT FROM NEW.status OR OLD.generation IS DISTINCT FROM NEW.generation THEN
        INSERT INTO job_transitions (job_id, old_status, new_status, old_generation, new_generation, failure_reason)
        VALUES (NEW.id, OLD.status, NEW.status, OLD.generation, NEW.generation, NEW.failure_reason);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER record_job_transition AFTER INSERT OR UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION record_job_transition();`

// cleanup drops the schema, the Redis keys and the files.
func cleanup(ctx context.Context, conns *flow.Conns, prefix, files string) {
	_, _ = conns.Pool.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{conns.Schema}.Sanitize()+` CASCADE`)
	iter := conns.Redis.Scan(ctx, 0, prefix+":*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		_ = conns.Redis.Del(ctx, keys...).Err()
	}
	_ = os.RemoveAll(files)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
