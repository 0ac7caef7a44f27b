package riversource_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/sourcetest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/riversource"
)

// chapterArgs are the args of a River job guarded by a row of the jobs
// table. An empty JobID leaves the key out of the args.
type chapterArgs struct {
	JobID string `json:"job_id,omitempty"`
}

func (chapterArgs) Kind() string { return "chapter" }

// holdWorker holds every job it is given until the test ends, as a worker
// stuck in a slow external call would.
type holdWorker struct {
	river.WorkerDefaults[chapterArgs]
	started chan *rivertype.JobRow
	release chan struct{}
}

func (w *holdWorker) Work(ctx context.Context, job *river.Job[chapterArgs]) error {
	w.started <- job.JobRow
	select {
	case <-w.release:
	case <-ctx.Done():
	}
	return nil
}

// migrateRiver creates River's tables in the test's schema with River's own
// migrations.
func migrateRiver(t *testing.T, env *testenv.Env) {
	t.Helper()
	_, err := migrator(t, env).Migrate(context.Background(), rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
}

func migrator(tb testing.TB, env *testenv.Env) *rivermigrate.Migrator[pgx.Tx] {
	tb.Helper()
	m, err := rivermigrate.New(riverpgxv5.New(env.Pool), &rivermigrate.Config{
		Schema: env.Schema, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(tb, err)
	return m
}

// river is a started River client over the test's schema whose worker holds
// its jobs until cleanup.
type riverClient struct {
	client *river.Client[pgx.Tx]
	worker *holdWorker
}

func startRiver(t *testing.T, env *testenv.Env) riverClient {
	t.Helper()
	migrateRiver(t, env)
	w := &holdWorker{started: make(chan *rivertype.JobRow, 16), release: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(env.Pool), &river.Config{
		Schema:            env.Schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:           workers,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		JobTimeout:        -1,
		Logger:            slog.New(slog.DiscardHandler),
		TestOnly:          true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		close(w.release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return riverClient{client: client, worker: w}
}

// hold inserts a job and waits until the worker holds it.
func (r riverClient) hold(t *testing.T, args chapterArgs) *rivertype.JobRow {
	t.Helper()
	res, err := r.client.Insert(context.Background(), args, nil)
	require.NoError(t, err)
	select {
	case row := <-r.worker.started:
		require.Equal(t, res.Job.ID, row.ID)
		return row
	case <-time.After(10 * time.Second):
		t.Fatal("River did not start the job")
		return nil
	}
}

func newSource(t *testing.T, env *testenv.Env, cfg riversource.Config) *riversource.Source {
	t.Helper()
	cfg.DB = env.Pool
	if cfg.Schema == "" {
		cfg.Schema = env.Schema
	}
	src, err := riversource.New(cfg)
	require.NoError(t, err)
	return src
}

// insertRunning writes a running River job row directly, in a queue no
// client works, attempted an hour ago.
func insertRunning(t *testing.T, env *testenv.Env, kind, queue, args string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, env.Pool.QueryRow(context.Background(), `INSERT INTO river_job
		(kind, queue, args, state, attempt, max_attempts, attempted_at)
		VALUES ($1, $2, $3::jsonb, 'running', 1, 25, now() - interval '1 hour') RETURNING id`,
		kind, queue, args).Scan(&id))
	return id
}

func TestActive_ReportsTheJobARealWorkerHoldsWithItsAttemptStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	r := startRiver(t, env)
	held := r.hold(t, chapterArgs{JobID: "row-1"})
	require.NotNil(t, held.AttemptedAt)
	// Neither a job waiting for its time nor a finished job is running.
	_, err := r.client.Insert(ctx, chapterArgs{JobID: "row-later"}, &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	env.Exec(`INSERT INTO river_job (kind, args, state, attempt, max_attempts, attempted_at, finalized_at)
		VALUES ('chapter', '{"job_id":"row-done"}', 'completed', 1, 25, now(), now())`)

	got, err := sourcetest.All(ctx, newSource(t, env, riversource.Config{}), 2)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "row-1", got[0].ID)
	require.Equal(t, "chapter", got[0].Type)
	require.NoError(t, got[0].Err)
	require.True(t, held.AttemptedAt.Equal(got[0].StartedAt),
		"StartedAt %s is River's attempted_at %s", got[0].StartedAt, held.AttemptedAt)
	require.Nil(t, got[0].Row, "the sweep reads the jobs table's row itself")
}

func TestActive_RunningJobWithoutRowIDIsAnErrorNotAGuess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	r := startRiver(t, env)
	held := r.hold(t, chapterArgs{}) // no job_id in the args

	got, err := sourcetest.All(ctx, newSource(t, env, riversource.Config{}), 2)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0].Err, riversource.ErrNoRowID)
	require.ErrorContains(t, got[0].Err, `no key "job_id"`)
	require.Equal(t, strconv.FormatInt(held.ID, 10), got[0].ID, "the River job id names it in the warning")

	// Through a sweep: counted and skipped, nothing written.
	jobs := fixture.Create(t, env, fixture.Default)
	rec, err := reclaim.New(reclaim.Config{
		Guard: jobs.Guard, DB: env.Pool, Redis: env.Redis,
		Source: newSource(t, env, riversource.Config{}),
		Limits: reclaim.StaticLimits{"chapter": time.Minute},
		Logger: slog.New(slog.DiscardHandler),
		Now:    func() time.Time { return time.Now().Add(time.Hour) },
	})
	require.NoError(t, err)
	rep, err := rec.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, reclaim.Report{Scanned: 1, SourceErrors: 1}, rep)
}

func TestActive_RowIDFromArgs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	migrateRiver(t, env)
	cases := []struct {
		args, id, err string
	}{
		{args: `{"job_id":"row-1"}`, id: "row-1"},
		{args: `{"job_id":42}`, id: "42"},
		{args: `{"row":"x"}`, err: `no key "job_id"`},
		{args: `{"job_id":null}`, err: "a JSON null"},
		{args: `{"job_id":""}`, err: "an empty string"},
		{args: `{"job_id":1.5}`, err: "is 1.5"},
		{args: `{"job_id":{"id":"row-2"}}`, err: "a JSON object"},
		{args: `["job_id"]`, err: `no key "job_id"`},
	}
	ids := make([]int64, len(cases))
	for i, c := range cases {
		ids[i] = insertRunning(t, env, "chapter", "elsewhere", c.args)
	}
	got, err := sourcetest.All(ctx, newSource(t, env, riversource.Config{}), 2)
	require.NoError(t, err)
	require.Len(t, got, len(cases))
	for i, c := range cases {
		j := got[i]
		if c.err == "" {
			require.NoError(t, j.Err, c.args)
			require.Equal(t, c.id, j.ID, c.args)
			require.False(t, j.StartedAt.IsZero())
			continue
		}
		require.ErrorIs(t, j.Err, riversource.ErrNoRowID, c.args)
		require.ErrorContains(t, j.Err, c.err, c.args)
		require.Equal(t, strconv.FormatInt(ids[i], 10), j.ID, c.args)
	}

	// Another key, named by the configuration.
	got, err = sourcetest.All(ctx, newSource(t, env, riversource.Config{RowIDKey: "row"}), 2)
	require.NoError(t, err)
	require.NoError(t, got[2].Err)
	require.Equal(t, "x", got[2].ID)
	require.ErrorIs(t, got[0].Err, riversource.ErrNoRowID)
}

func TestActive_FiltersQueuesAndMapsKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	migrateRiver(t, env)
	insertRunning(t, env, "chapter", "courses", `{"job_id":"c1"}`)
	insertRunning(t, env, "video", "media", `{"job_id":"v1"}`)
	insertRunning(t, env, "email", "courses", `{"to":"someone"}`)

	ids := func(src *riversource.Source) map[string]string {
		got, err := sourcetest.All(ctx, src, 2)
		require.NoError(t, err)
		m := map[string]string{}
		for _, j := range got {
			require.NoError(t, j.Err)
			m[j.ID] = j.Type
		}
		return m
	}
	require.Equal(t, map[string]string{"c1": "course_chapter", "v1": "video_encode"},
		ids(newSource(t, env, riversource.Config{Types: map[string]string{"chapter": "course_chapter", "video": "video_encode"}})),
		"kinds not in Types are not guarded jobs and are not read")
	require.Equal(t, map[string]string{"v1": "video"},
		ids(newSource(t, env, riversource.Config{Queues: []string{"media"}})))
	require.Equal(t, map[string]string{"c1": "chapter"},
		ids(newSource(t, env, riversource.Config{Queues: []string{"courses", "other"}, Types: map[string]string{"chapter": "chapter"}})))
}

func TestActive_SchemaFromSearchPath(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	migrateRiver(t, env)
	insertRunning(t, env, "chapter", "q", `{"job_id":"c1"}`)
	src, err := riversource.New(riversource.Config{DB: env.Pool}) // the pool's search_path is the test's schema
	require.NoError(t, err)
	got, err := sourcetest.All(context.Background(), src, 2)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "c1", got[0].ID)
}

func TestActive_MissingRiverTableFailsTheRead(t *testing.T) {
	t.Parallel()
	env := testenv.New(t) // River's migrations not applied
	_, err := sourcetest.All(context.Background(), newSource(t, env, riversource.Config{}), 2)
	require.ErrorContains(t, err, "riversource: read river_job")
}

func TestSweep_ReclaimsAStalledJobARealWorkerHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stalled := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	alive := jobs.Insert(t, fixture.Job{})
	r := startRiver(t, env)
	r.hold(t, chapterArgs{JobID: stalled})
	r.hold(t, chapterArgs{JobID: alive})
	// An hour into both attempts, by River's clock (the database's) and the
	// rows' own start; only one of them has made progress.
	env.Exec(`UPDATE river_job SET attempted_at = attempted_at - interval '1 hour' WHERE state = 'running'`)
	env.Exec(`UPDATE jobs SET started_at = started_at - interval '1 hour' WHERE id = $1`, alive)

	rec, err := reclaim.New(reclaim.Config{
		Guard: jobs.Guard, DB: env.Pool, Redis: env.Redis,
		Source: newSource(t, env, riversource.Config{}),
		Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute},
		Logger: slog.New(slog.DiscardHandler),
		// A reclaimer whose clock runs half a day ahead: River's start is
		// measured on the clock that stamped it, and changes nothing.
		Now: func() time.Time { return time.Now().Add(12 * time.Hour) },
	})
	require.NoError(t, err)
	rep, err := rec.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Scanned)
	require.Equal(t, 1, rep.Progressing)
	require.Equal(t, []string{stalled}, rep.ReclaimedIDs)
	require.Equal(t, jobs.Table.Statuses.Failed, jobs.Read(t, stalled).Status)
	require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, alive).Status)
}

func TestNew_ErrorsNameTheField(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	_, err := riversource.New(riversource.Config{})
	require.ErrorContains(t, err, "DB")
	_, err = riversource.New(riversource.Config{DB: env.Pool, RowIDKey: "a\x00b"})
	require.ErrorContains(t, err, "RowIDKey")
	_, err = riversource.New(riversource.Config{DB: env.Pool, Schema: string(make([]byte, 64))})
	require.ErrorContains(t, err, "Schema")
	_, err = riversource.New(riversource.Config{DB: env.Pool, Queues: []string{""}})
	require.ErrorContains(t, err, "Queues")
	_, err = riversource.New(riversource.Config{DB: env.Pool, Types: map[string]string{"chapter": ""}})
	require.ErrorContains(t, err, "Types")
}
