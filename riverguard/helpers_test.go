package riverguard_test

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/riversource"
	"github.com/jobguard/jobguard/riverguard"
	"github.com/jobguard/jobguard/watch"
)

// chapterArgs are the args of a River job guarded by a row of the jobs
// table: a JSON string, or a JSON integer for a table with integer ids.
type chapterArgs struct {
	JobID any `json:"job_id,omitempty"`
}

func (chapterArgs) Kind() string { return "chapter" }

// rawArgs are args of kind chapter spelled out as JSON, for args that do
// not name a row.
type rawArgs string

func (rawArgs) Kind() string                   { return "chapter" }
func (a rawArgs) MarshalJSON() ([]byte, error) { return []byte(a), nil }

// emailArgs are the args of a kind that has no row in the jobs table.
type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email" }

// work is what a test's chapter worker does with a delivery.
type work func(ctx context.Context, job *river.Job[chapterArgs]) error

// chapterWorker runs the test's work, counting its calls, and retries an
// errored job at once.
type chapterWorker struct {
	river.WorkerDefaults[chapterArgs]
	work  work
	calls atomic.Int32
}

func (w *chapterWorker) Work(ctx context.Context, job *river.Job[chapterArgs]) error {
	w.calls.Add(1)
	return w.work(ctx, job)
}

func (w *chapterWorker) NextRetry(*river.Job[chapterArgs]) time.Time { return time.Now() }

// emailWorker records whether its context carried an execution.
type emailWorker struct {
	river.WorkerDefaults[emailArgs]
	sawExecution chan bool
}

func (w *emailWorker) Work(ctx context.Context, _ *river.Job[emailArgs]) error {
	_, ok := riverguard.Execution(ctx)
	w.sawExecution <- ok
	return nil
}

// options shape a test's setup.
type options struct {
	// Variant is the jobs table's shape. Defaults to fixture.Default.
	Variant fixture.Variant
	// Watch runs a watcher over LISTEN/NOTIFY and gives it to the
	// middleware; the reclaimer publishes its notices to it.
	Watch bool
	// StartGuard configures the start guard.
	StartGuard jobguard.StartGuardConfig
	// Redis, when set, keeps the markers in Redis, in this client. Unset,
	// the suite runs as a River shop without Redis does: markers in
	// Postgres, notices over LISTEN/NOTIFY, and no Redis client anywhere.
	Redis marker.Redis
	// DB, when set, is the middleware's DB instead of the test's pool.
	DB jobguard.DB
	// Kinds is the middleware's Config.Kinds.
	Kinds []string
	// RescueStuckJobsAfter is River's own rescue of a job left running;
	// 0 is River's default (an hour). River's rescuer leaves alone a job
	// without a timeout: give it JobTimeout too.
	RescueStuckJobsAfter time.Duration
	// JobTimeout is River's; 0 is none.
	JobTimeout time.Duration
}

// bundle is one test's jobs table, River client and worker.
type bundle struct {
	env    *testenv.Env
	rdb    marker.Redis // nil: markers in Postgres
	jobs   *fixture.Jobs
	client *river.Client[pgx.Tx]
	worker *chapterWorker
	email  *emailWorker
	events <-chan *river.Event
	pub    *watch.Publisher  // nil without Watch
	owner  *fixture.Handover // the start guard's Owner, when it is one
}

// setup creates the jobs table, a products table (chapters) and River's
// tables in a schema of the test's own, and starts a River client whose
// chapter worker does w under the middleware.
func setup(t *testing.T, w work, o options) *bundle {
	t.Helper()
	ctx := context.Background()
	if o.Variant.Name == "" {
		o.Variant = fixture.Default
	}
	env := testenv.New(t)
	b := &bundle{env: env, jobs: fixture.Create(t, env, o.Variant)}
	env.Exec(lease.Migration)
	env.Exec(`CREATE TABLE chapters (job_id text NOT NULL, generation bigint NOT NULL)`)
	migrateRiver(t, env)

	b.rdb = o.Redis
	if b.rdb == nil {
		b.jobs.Guard = b.jobs.NoRedis(t)
	}
	o.StartGuard.Logger = slog.New(slog.DiscardHandler)
	b.owner, _ = o.StartGuard.Owner.(*fixture.Handover)
	starts, err := jobguard.NewStartGuard(b.jobs.Guard, b.rdb, o.StartGuard)
	require.NoError(t, err)
	cfg := riverguard.Config{StartGuard: starts, DB: o.DB, Kinds: o.Kinds, Logger: slog.New(slog.DiscardHandler)}
	if cfg.DB == nil {
		cfg.DB = env.Pool
	}
	if o.Watch {
		cfg.Watcher = startWatcher(t, b)
	}
	mw, err := riverguard.New(cfg)
	require.NoError(t, err)

	b.worker = &chapterWorker{work: w}
	b.email = &emailWorker{sawExecution: make(chan bool, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, b.worker)
	river.AddWorker(workers, b.email)
	b.client, err = river.NewClient(riverpgxv5.New(env.Pool), &river.Config{
		Schema:               env.Schema,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:              workers,
		Middleware:           []rivertype.Middleware{mw},
		FetchCooldown:        10 * time.Millisecond,
		FetchPollInterval:    50 * time.Millisecond,
		JobTimeout:           cmp.Or(o.JobTimeout, -1),
		RescueStuckJobsAfter: o.RescueStuckJobsAfter,
		Logger:               slog.New(slog.DiscardHandler),
		TestOnly:             true,
	})
	require.NoError(t, err)
	events, unsubscribe := b.client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled,
		river.EventKindJobFailed, river.EventKindJobSnoozed)
	t.Cleanup(unsubscribe)
	b.events = events
	require.NoError(t, b.client.Start(ctx))
	t.Cleanup(func() {
		// A worker a failed test left holding its job stops with its context.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.client.StopAndCancel(ctx))
	})
	return b
}

// startWatcher runs a watcher over LISTEN/NOTIFY until the test ends, and
// the publisher the reclaimer announces through.
func startWatcher(t *testing.T, b *bundle) *watch.Watcher {
	t.Helper()
	transport := watch.Transport{Postgres: b.env.Connect(testenv.Config{})}
	w, err := watch.New(watch.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Transport: transport,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	b.pub, err = watch.NewPublisher(b.jobs.Guard, transport)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher did not subscribe")
	}
	return w
}

// migrateRiver creates River's tables in the test's schema with River's own
// migrations.
func migrateRiver(tb testing.TB, env *testenv.Env) {
	tb.Helper()
	m, err := rivermigrate.New(riverpgxv5.New(env.Pool), &rivermigrate.Config{
		Schema: env.Schema, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(tb, err)
	_, err = m.Migrate(context.Background(), rivermigrate.DirectionUp, nil)
	require.NoError(tb, err)
}

// queue inserts a QUEUED row and returns its id.
func (b *bundle) queue(t *testing.T) string {
	t.Helper()
	return b.jobs.Insert(t, fixture.Job{Status: b.jobs.Table.Statuses.Queued})
}

// insert queues a River job with args and returns its id.
func (b *bundle) insert(t *testing.T, args river.JobArgs) int64 {
	t.Helper()
	res, err := b.client.Insert(context.Background(), args, nil)
	require.NoError(t, err)
	return res.Job.ID
}

// await returns the next event of River job id.
func (b *bundle) await(t *testing.T, id int64) *river.Event {
	t.Helper()
	timeout := time.After(testenv.Patience)
	for {
		select {
		case ev := <-b.events:
			if ev.Job != nil && ev.Job.ID == id {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event for River job %d within %v", id, testenv.Patience)
			return nil
		}
	}
}

// waitFor waits for a signal on ch.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("waited 15s for %s", what)
	}
}

// riverJob reads River's job as it stands.
func (b *bundle) riverJob(t *testing.T, id int64) *rivertype.JobRow {
	t.Helper()
	job, err := b.client.JobGet(context.Background(), id)
	require.NoError(t, err)
	return job
}

// lastError is the error River recorded for the job's latest attempt.
func lastError(t *testing.T, job *rivertype.JobRow) string {
	t.Helper()
	require.NotEmpty(t, job.Errors, "River recorded no error for job %d", job.ID)
	return job.Errors[len(job.Errors)-1].Error
}

// save is the worker's save: one CompleteTx under the execution the
// middleware started, its first write the conditional completion, then a
// product row.
func (b *bundle) save(ctx context.Context) error {
	exec, ok := riverguard.Execution(ctx)
	if !ok {
		return errors.New("no execution in the worker's context")
	}
	return b.jobs.Guard.CompleteTx(ctx, b.env.Pool, exec, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO chapters (job_id, generation) VALUES ($1, $2)`, exec.JobID, exec.Generation)
		return err
	})
}

// chapters counts the product rows of job id.
func (b *bundle) chapters(t *testing.T, id string) int {
	t.Helper()
	var n int
	require.NoError(t, b.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM chapters WHERE job_id = $1`, id).Scan(&n))
	return n
}

// reclaim has the reclaimer, reading River's running jobs through
// riversource, reclaim job id as a stalled job: its attempt is made an hour
// old and its progress two hours old first. With Watch, the reclaimer
// publishes its notice.
func (b *bundle) reclaim(t *testing.T, id string) {
	t.Helper()
	b.jobs.Backdate(t, id, b.jobs.Table.UpdatedAtColumn, 2*time.Hour)
	b.jobs.Backdate(t, id, b.jobs.Table.StartedAtColumn, time.Hour)
	b.env.Exec(`UPDATE river_job SET attempted_at = attempted_at - interval '1 hour' WHERE state = 'running'`)
	src, err := riversource.New(riversource.Config{DB: b.env.Pool, Schema: b.env.Schema})
	require.NoError(t, err)
	cfg := reclaim.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool, Redis: b.rdb, Source: src,
		Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute},
		Logger: slog.New(slog.DiscardHandler),
	}
	if b.pub != nil {
		cfg.Notices = b.pub
	}
	rec, err := reclaim.New(cfg)
	require.NoError(t, err)
	rep, err := rec.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{id}, rep.ReclaimedIDs, "report: %+v", rep)
}

// unreachablePool is a pool to a port nothing listens on.
func unreachablePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+closedAddr(t)+"/test?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// closedAddr is a loopback host:port that refuses connections.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
