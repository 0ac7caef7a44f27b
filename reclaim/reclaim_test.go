package reclaim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
)

// listSource is a queue whose active jobs are known in advance, listed a
// page at a time as the sweep asks.
type listSource []reclaim.ActiveJob

func (s listSource) Active(_ context.Context, q reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	for len(s) > 0 {
		n := min(q.PageSize, len(s))
		if err := page(s[:n]); err != nil {
			return err
		}
		s = s[n:]
	}
	return nil
}

// noBrake turns every cap and check of the brake off, for the tests of
// other things that stall many jobs at once.
var noBrake = reclaim.Brake{MaxJobs: -1, MaxShare: -1, MaxJobsPerType: -1, MaxSharePerType: -1, ClockJump: -1}

// failingSource is a queue that cannot be read at all.
type failingSource struct{}

func (failingSource) Active(context.Context, reclaim.Query, func([]reclaim.ActiveJob) error) error {
	return errors.New("queue unreachable")
}

// newReclaimer fills in what every test shares: the guard, the pool, Redis
// with the test's prefix, a 30-minute limit for chapters, a 15-minute
// no-progress threshold, and a logger the test can read.
func newReclaimer(t testing.TB, jobs *fixture.Jobs, cfg reclaim.Config) (*reclaim.Reclaimer, *testenv.Logs) {
	t.Helper()
	logs := &testenv.Logs{}
	if cfg.Guard == nil {
		cfg.Guard = jobs.Guard
	}
	if cfg.DB == nil {
		cfg.DB = jobs.Env.Pool
	}
	if cfg.Redis == nil {
		cfg.Redis = jobs.Env.Redis
	}
	if cfg.Limits == nil {
		cfg.Limits = reclaim.StaticLimits{"chapter": 30 * time.Minute}
	}
	if cfg.Logger == nil {
		cfg.Logger = logs.Logger()
	}
	r, err := reclaim.New(cfg)
	require.NoError(t, err)
	return r, logs
}

// setUpdatedAgo moves a job's updated_at to now - ago.
func setUpdatedAgo(t *testing.T, jobs *fixture.Jobs, id string, ago time.Duration) {
	t.Helper()
	jobs.Backdate(t, id, jobs.Table.UpdatedAtColumn, ago)
}

func markers(t testing.TB, jobs *fixture.Jobs) *marker.RedisStore {
	t.Helper()
	m, err := marker.NewRedisStore(jobs.Guard, jobs.Env.Redis, marker.Config{})
	require.NoError(t, err)
	return m
}

func hasMarker(t testing.TB, jobs *fixture.Jobs, id string) bool {
	t.Helper()
	_, found, err := markers(t, jobs).Read(context.Background(), id)
	require.NoError(t, err)
	return found
}

func TestSweep_DecisionTable(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		st := jobs.Table.Statuses
		now := time.Now()
		// Every row's attempt started two hours ago; updatedAgo is its
		// progress.
		insert := func(updatedAgo time.Duration, status string) string {
			id := jobs.Insert(t, fixture.Job{Status: status, Generation: 1, UpdatedAgo: 2 * time.Hour})
			setUpdatedAgo(t, jobs, id, updatedAgo)
			return id
		}
		stalled := insert(time.Hour, "")            // over limit, stalled → reclaimed
		alive := insert(time.Minute, "")            // over limit, recent progress → kept
		young := insert(time.Hour, "")              // within limit, stalled → kept
		noStart := insert(time.Hour, "")            // no start time anywhere → skipped
		unknown := insert(time.Hour, "")            // type without a limit → skipped
		unread := insert(time.Hour, "")             // source error → skipped
		finished := insert(time.Hour, st.Completed) // row already terminal → left alone
		if jobs.Table.StartedAtColumn != "" {
			// The row's own start column counts too: take it away.
			jobs.Env.Exec(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s::text = $1", jobs.Table.QualifiedName(),
				ident.Quote(jobs.Table.StartedAtColumn), ident.Quote(jobs.Table.IDColumn)), noStart)
		}
		old := now.Add(-2 * time.Hour)
		src := listSource{
			{ID: stalled, Type: "chapter", StartedAt: old},
			{ID: alive, Type: "chapter", StartedAt: old},
			{ID: young, Type: "chapter", StartedAt: now.Add(-10 * time.Minute)},
			{ID: noStart, Type: "chapter"},
			{ID: unknown, Type: "mystery", StartedAt: old},
			{ID: unread, Type: "chapter", Err: errors.New("hash unreadable")},
			{ID: finished, Type: "chapter", StartedAt: old},
			{ID: stalled, Type: "chapter", StartedAt: old}, // listed twice, decided once
		}
		r, logs := newReclaimer(t, jobs, reclaim.Config{Source: src})

		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, reclaim.Report{
			Scanned: 7, NoStartTime: 1, SourceErrors: 1, UnknownType: 1, WithinLimit: 1,
			NotActive: 1, Progressing: 1, Reclaimed: 1, ReclaimedIDs: []string{stalled},
		}, rep)

		got := jobs.Read(t, stalled)
		require.Equal(t, st.Failed, got.Status)
		require.Equal(t, jobguard.ReclaimedReasonDefault, got.Reason)
		require.True(t, hasMarker(t, jobs, stalled))
		for _, id := range []string{alive, young, noStart, unknown, unread} {
			require.Equal(t, st.Processing, jobs.Read(t, id).Status, "job %s must be left alone", id)
			require.False(t, hasMarker(t, jobs, id))
		}
		require.Equal(t, st.Completed, jobs.Read(t, finished).Status)
		// One line says it all, at warn: a job that cannot be read and a type
		// without a limit need an operator.
		require.Equal(t, 1, strings.Count(logs.String(), "msg=\"reclaim: sweep\""), logs.String())
		require.Contains(t, logs.String(), "level=WARN msg=\"reclaim: sweep\" scanned=7 reclaimed=1")
		require.Contains(t, logs.String(), "types_without_limit=[mystery]")
		require.Contains(t, logs.String(), "hash unreadable")
	})
}

func TestSweep_SourceFailureChangesNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: failingSource{}})

	rep, err := r.Sweep(context.Background())
	require.ErrorContains(t, err, "queue unreachable")
	require.Zero(t, rep.Reclaimed)
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
}

func TestSweep_TableSourceReadsStartedAt(t *testing.T) {
	t.Parallel()
	for _, v := range []fixture.Variant{fixture.Default, fixture.Prisma} {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, v)
			stalled := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
			young := jobs.Insert(t, fixture.Job{UpdatedAgo: 5 * time.Minute})
			noStart := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
			env.Exec(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s = $1", jobs.Table.QualifiedName(),
				ident.Quote(jobs.Table.StartedAtColumn), ident.Quote(jobs.Table.IDColumn)), noStart)
			jobs.Insert(t, fixture.Job{Status: "QUEUED"})
			r, _ := newReclaimer(t, jobs, reclaim.Config{}) // the table source is the default

			rep, err := r.Sweep(context.Background())
			require.NoError(t, err)
			// The table source reads only the jobs over their limit: the young
			// one and the one without a start are never read, and the one
			// without a start is counted.
			require.Equal(t, reclaim.Report{Scanned: 1, NoStartTime: 1, Reclaimed: 1, ReclaimedIDs: []string{stalled}}, rep)
			require.Equal(t, "PROCESSING", jobs.Read(t, young).Status)
			require.Equal(t, "PROCESSING", jobs.Read(t, noStart).Status)
		})
	}
}

func TestNew_TableSourceNeedsStartedAtColumn(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.IntID)
	_, err := reclaim.New(reclaim.Config{Guard: jobs.Guard, DB: env.Pool, Redis: env.Redis})
	require.ErrorContains(t, err, "Source")
	require.ErrorContains(t, err, "StartedAtColumn")
}

func TestNew_ErrorsNameTheField(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	base := reclaim.Config{Guard: jobs.Guard, DB: env.Pool, Redis: env.Redis}
	for field, mutate := range map[string]func(*reclaim.Config){
		"Guard":      func(c *reclaim.Config) { c.Guard = nil },
		"DB":         func(c *reclaim.Config) { c.DB = nil },
		"Redis":      func(c *reclaim.Config) { c.Redis = nil },
		"NoProgress": func(c *reclaim.Config) { c.NoProgress = -time.Second },
		"Interval":   func(c *reclaim.Config) { c.Interval = -time.Second },
		"Markers":    func(c *reclaim.Config) { c.Markers.TTL = time.Millisecond },
		"OnReclaim":  func(c *reclaim.Config) { c.OnReclaim = map[string]reclaim.ParentRule{"chapter": nil} },
	} {
		cfg := base
		mutate(&cfg)
		_, err := reclaim.New(cfg)
		require.ErrorContains(t, err, field, field)
	}
	_, err := reclaim.New(base)
	require.NoError(t, err)
}

// courses creates a parent table with one course per given id, GENERATING
// as a running chapter job leaves it.
func courses(t *testing.T, env *testenv.Env, ids ...string) {
	t.Helper()
	env.Exec(`CREATE TABLE courses (id text PRIMARY KEY, status text NOT NULL, export_status text, failures int NOT NULL DEFAULT 0)`)
	for _, id := range ids {
		env.Exec(`INSERT INTO courses (id, status) VALUES ($1, 'GENERATING')`, id)
	}
}

func courseStatus(t *testing.T, env *testenv.Env, id string) (status string, export *string, failures int) {
	t.Helper()
	err := env.Pool.QueryRow(context.Background(),
		`SELECT status, export_status, failures FROM courses WHERE id = $1`, id).Scan(&status, &export, &failures)
	require.NoError(t, err)
	return status, export, failures
}

func failCourse(t *testing.T) reclaim.ParentRule {
	rule, err := reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Column: "status", Value: "FAILED", From: []string{"GENERATING"}})
	require.NoError(t, err)
	return rule
}

// afterRead is a source that runs between after every page is read and
// before the sweep decides on it: a worker's write in that window.
type afterRead struct {
	reclaim.Source
	between func()
}

func (s afterRead) Active(ctx context.Context, q reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	return s.Source.Active(ctx, q, func(jobs []reclaim.ActiveJob) error {
		s.between()
		return page(jobs)
	})
}

func TestSweep_ProgressBetweenReadAndWriteLosesTheRace(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		t.Run(fmt.Sprintf("simple=%v", simple), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := testenv.New(t, testenv.Config{SimpleProtocol: simple})
			jobs := fixture.Create(t, env, fixture.Default)
			courses(t, env, "course-a", "course-b")
			racer := jobs.Insert(t, fixture.Job{ParentID: "course-a", UpdatedAgo: 2 * time.Hour})
			loser := jobs.Insert(t, fixture.Job{ParentID: "course-b", UpdatedAgo: 2 * time.Hour})
			// A worker saves progress for the racer after the sweep read the
			// rows, before it writes them.
			src, err := reclaim.NewTableSource(jobs.Guard, env.Pool)
			require.NoError(t, err)
			progress := func() { env.Exec(`UPDATE jobs SET updated_at = now() WHERE id = $1`, racer) }
			r, _ := newReclaimer(t, jobs, reclaim.Config{
				Source:    afterRead{src, progress},
				OnReclaim: map[string]reclaim.ParentRule{"chapter": failCourse(t)},
			})

			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, rep.LostRace)
			require.Equal(t, 1, rep.Reclaimed)
			require.Equal(t, []string{loser}, rep.ReclaimedIDs)
			require.Equal(t, "PROCESSING", jobs.Read(t, racer).Status)
			status, _, _ := courseStatus(t, env, "course-a")
			require.Equal(t, "GENERATING", status, "a lost race must not touch the parent")
			require.False(t, hasMarker(t, jobs, racer), "a lost race must not write a marker")
			status, _, _ = courseStatus(t, env, "course-b")
			require.Equal(t, "FAILED", status)
			require.True(t, hasMarker(t, jobs, loser))
		})
	}
}

func TestSweep_ExportKeepsSourceReady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	courses(t, env, "course-1")
	env.Exec(`UPDATE courses SET status = 'READY', export_status = 'PROCESSING'`)
	export := jobs.Insert(t, fixture.Job{Type: "export", ParentID: "course-1", UpdatedAgo: 2 * time.Hour})

	exportFailed, err := reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Column: "export_status", Value: "FAILED", From: []string{"PROCESSING"}})
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{
		Limits:    reclaim.StaticLimits{"export": time.Hour},
		OnReclaim: map[string]reclaim.ParentRule{"export": exportFailed, "chapter": failCourse(t)},
	})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{export}, rep.ReclaimedIDs)

	status, exportStatus, _ := courseStatus(t, env, "course-1")
	require.Equal(t, "READY", status, "the export's source stays READY")
	require.NotNil(t, exportStatus)
	require.Equal(t, "FAILED", *exportStatus)
}

func TestSweep_ReclaimedJobIsRefusedAtStartUntilRetried(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		id := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: time.Hour})
		r, _ := newReclaimer(t, jobs, reclaim.Config{
			Source: listSource{{ID: id, Type: "chapter", StartedAt: time.Now().Add(-time.Hour)}},
		})
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Reclaimed)

		sg, err := jobguard.NewStartGuard(jobs.Guard, jobs.Env.Redis,
			jobguard.StartGuardConfig{})
		require.NoError(t, err)
		m, found, err := sg.Markers().Read(ctx, id)
		require.NoError(t, err)
		require.True(t, found, "the marker is written")
		if jobs.Guard.Fenced() {
			require.EqualValues(t, 3, m.Generation)
		}
		require.Equal(t, jobguard.ReclaimedReasonDefault, jobs.Read(t, id).Reason, "the database reason is written")

		_, err = sg.Start(ctx, db, id)
		require.ErrorIs(t, err, jobguard.ErrReclaimed)
		require.True(t, jobguard.IsPermanent(err))
		require.ErrorIs(t, sg.Check(ctx, db, id), jobguard.ErrReclaimed)

		_, err = jobs.Guard.Retry(ctx, db, id)
		require.NoError(t, err)
		if !jobs.Guard.Fenced() {
			// Status-only mode cannot tell an old marker from a fresh one.
			require.NoError(t, sg.Markers().Delete(ctx, id))
		}
		exec, err := sg.Start(ctx, db, id)
		require.NoError(t, err)
		require.Equal(t, id, exec.JobID)
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status)
	})
}

func TestSweep_ConcurrentReclaimersReclaimEachJobOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	const n = 200
	var ids []string
	env.Exec(`CREATE TABLE courses (id text PRIMARY KEY, status text NOT NULL, export_status text, failures int NOT NULL DEFAULT 0)`)
	for i := range n {
		course := fmt.Sprintf("course-%d", i)
		env.Exec(`INSERT INTO courses (id, status) VALUES ($1, 'GENERATING')`, course)
		ids = append(ids, jobs.Insert(t, fixture.Job{ParentID: course, UpdatedAgo: 2 * time.Hour}))
	}
	countFailure := func(ctx context.Context, tx pgx.Tx, jobs []jobset.Job) error {
		var parents []string
		for _, j := range jobs {
			parents = append(parents, j.ParentID)
		}
		_, err := tx.Exec(ctx, `UPDATE courses SET status = 'FAILED', failures = failures + 1 WHERE id = ANY($1)`, parents)
		return err
	}

	const sweepers = 4
	reps := make([]reclaim.Report, sweepers)
	errs := make([]error, sweepers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	all := listSource{}
	for _, id := range ids {
		all = append(all, reclaim.ActiveJob{ID: id, Type: "chapter", StartedAt: time.Now().Add(-2 * time.Hour)})
	}
	for i := range sweepers {
		cfg := reclaim.Config{
			DB:        env.Connect(testenv.Config{}), // a separate pool each, like separate instances
			OnReclaim: map[string]reclaim.ParentRule{"chapter": countFailure},
			// Every job stalled at once, which the brake holds back: the
			// test is of the race between the sweepers.
			Brake: noBrake,
		}
		if i%2 == 1 {
			cfg.Source = all // rows read by Sweep, not by the source
		}
		r, _ := newReclaimer(t, jobs, cfg)
		wg.Go(func() {
			<-start
			reps[i], errs[i] = r.Sweep(ctx)
		})
	}
	close(start)
	wg.Wait()

	var reclaimed []string
	for i, rep := range reps {
		require.NoError(t, errs[i])
		reclaimed = append(reclaimed, rep.ReclaimedIDs...)
		t.Logf("sweeper %d: scanned %d, reclaimed %d, lost the race %d, held by another %d, found done %d",
			i, rep.Scanned, rep.Reclaimed, rep.LostRace, rep.Locked, rep.NotActive)
		require.Equal(t, rep.Scanned, rep.Reclaimed+rep.LostRace+rep.Locked+rep.NotActive,
			"every job a sweeper saw is reclaimed by it, lost to another, skipped while another held it, or found done")
	}
	slices.Sort(reclaimed)
	want := slices.Clone(ids)
	slices.Sort(want)
	require.Equal(t, want, reclaimed, "every job reclaimed exactly once")

	var bad int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM courses WHERE failures <> 1 OR status <> 'FAILED'`).Scan(&bad))
	require.Zero(t, bad, "every parent changed exactly once")
}

func TestSweep_MarkerFailureIsCountedNotFatal(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	// A real client of a server that is not there.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	r, logs := newReclaimer(t, jobs, reclaim.Config{Redis: down})

	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Reclaimed)
	require.Equal(t, 1, rep.MarkerErrors)
	require.Equal(t, "FAILED", jobs.Read(t, id).Status, "the database write stands")
	require.Contains(t, logs.String(), "level=WARN msg=\"reclaim: sweep\"")
	require.Contains(t, logs.String(), "marker_errors=1")
	require.Contains(t, logs.String(), "marker_error=")
}

func TestTableLimits_ReadAtEverySweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(reclaim.Migration)
	env.Exec(reclaim.Migration) // safe to run twice
	env.Exec(`INSERT INTO job_type_limits (job_type, max_runtime) VALUES ('chapter', '3 hours')`)
	id := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	r, _ := newReclaimer(t, jobs, reclaim.Config{Limits: tableLimits(t, env)})

	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Reclaimed)
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)

	env.Exec(`UPDATE job_type_limits SET max_runtime = '90 minutes' WHERE job_type = 'chapter'`)
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{id}, rep.ReclaimedIDs, "the operator's change applies at the next sweep")
}

func TestTableLimits_DefaultTableIsRead(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(reclaim.Migration)
	env.Exec(`INSERT INTO job_type_limits VALUES ('video', '1 hour 30 minutes 0.5 seconds')`)
	got, err := tableLimits(t, env).Limits(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[string]time.Duration{"video": 90*time.Minute + 500*time.Millisecond}, got)
}

func TestSetParent_RefusesBadIdentifiers(t *testing.T) {
	t.Parallel()
	_, err := reclaim.SetParent(reclaim.ParentUpdate{Column: "status", Value: "FAILED"})
	require.ErrorContains(t, err, "Table")
	_, err = reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Value: "FAILED"})
	require.ErrorContains(t, err, "Column")
	_, err = reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Column: "status"})
	require.ErrorContains(t, err, "Value")
	_, err = reclaim.SetParent(reclaim.ParentUpdate{Schema: "a\x00b", Table: "courses", Column: "status", Value: "FAILED", From: []string{"X"}})
	require.ErrorContains(t, err, "Schema")
	_, err = reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Column: "status", Value: "FAILED"})
	require.ErrorContains(t, err, "From")
}

func tableLimits(t *testing.T, env *testenv.Env) *reclaim.TableLimits {
	t.Helper()
	l, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool})
	require.NoError(t, err)
	return l
}

func TestNewTableLimits_ErrorsNameTheField(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	_, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{})
	require.ErrorContains(t, err, "DB")
	_, err = reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool, Table: "a\x00b"})
	require.ErrorContains(t, err, "Table")
	_, err = reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool, Schema: strings.Repeat("s", 64)})
	require.ErrorContains(t, err, "Schema")
}

func TestSweep_FailingParentRuleHoldsBackOnlyItsJobs(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	chapter := jobs.Insert(t, fixture.Job{ParentID: "course-1", UpdatedAgo: 2 * time.Hour})
	video := jobs.Insert(t, fixture.Job{Type: "video", UpdatedAgo: 2 * time.Hour})
	broken := func(context.Context, pgx.Tx, []jobset.Job) error { return errors.New("parent table locked") }
	r, logs := newReclaimer(t, jobs, reclaim.Config{
		Limits:    reclaim.StaticLimits{"chapter": 30 * time.Minute, "video": 30 * time.Minute},
		OnReclaim: map[string]reclaim.ParentRule{"chapter": broken},
	})

	rep, err := r.Sweep(context.Background())
	require.NoError(t, err, "a rule's failure is counted, not returned")
	require.Equal(t, 1, rep.RuleErrors)
	require.Equal(t, []string{video}, rep.ReclaimedIDs)
	require.Equal(t, "PROCESSING", jobs.Read(t, chapter).Status, "the job is not failed without its parent")
	require.False(t, hasMarker(t, jobs, chapter))
	require.Contains(t, logs.String(), `rule_error="job `+chapter+`: OnReclaim[\"chapter\"]: parent table locked"`)
}
