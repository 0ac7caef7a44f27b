package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/commitgate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// cancel fails a PROCESSING job with its reason and bumps its generation;
// it refuses a job that is FAILED (cancelled already, too) or COMPLETED
// with exit 4, changing nothing; an unknown job exits 3, a malformed id 2;
// retry undoes the cancel.
func TestCancel_CancelsAnActiveJobAndRefusesAFinishedOne(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Prisma)
	running := b.jobs.Insert(t, fixture.Job{Generation: 2})
	completed := b.jobs.Insert(t, fixture.Job{Status: "COMPLETED", Generation: 5})

	r := b.run(t, "cancel", "--reason", "wrong prompt", running)
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "Job "+running+": PROCESSING -> FAILED, generation 2 -> 3.")
	require.Contains(t, r.stdout, `Failure reason: "cancelled by operator: wrong prompt".`)
	row := b.jobs.Read(t, running)
	require.Equal(t, "FAILED", row.Status)
	require.Equal(t, "cancelled by operator: wrong prompt", row.Reason)
	require.EqualValues(t, 3, row.Generation)

	r = b.run(t, "cancel", running)
	require.Equal(t, exitRefused, r.code, r)
	require.Contains(t, r.stderr, "job "+running+" is FAILED (cancelled already): only a QUEUED or PROCESSING job can be cancelled; nothing was changed")
	require.Equal(t, row, b.jobs.Read(t, running))

	r = b.run(t, "cancel", "--json", completed)
	require.Equal(t, exitRefused, r.code, r)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "is COMPLETED: only a QUEUED or PROCESSING job can be cancelled")
	require.Equal(t, "COMPLETED", b.jobs.Read(t, completed).Status)

	r = b.run(t, "cancel", "c-no-such-job")
	require.Equal(t, exitNotFound, r.code, r)
	require.Contains(t, r.stderr, "job c-no-such-job not found in ")

	r = b.run(t, "retry", running)
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, `Cleared failure reason: "cancelled by operator: wrong prompt".`)
	require.Equal(t, "QUEUED", b.jobs.Read(t, running).Status)
}

// --json prints the row before and after; every spelling of a uuid names
// the one job, printed by its canonical id; a malformed one is a usage
// error; a mistyped command or flag gets its suggestion.
func TestCancel_JSONSpellingsAndMistakes(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	for _, sp := range b.jobs.Spellings(b.jobs.Insert(t, fixture.Job{})) {
		id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED", Generation: 4})
		var spelled string
		for _, s := range b.jobs.Spellings(id) {
			if s.Name == sp.Name {
				spelled = s.ID
			}
		}
		r := b.run(t, "cancel", "--json", "--reason", "dup", spelled)
		require.Equal(t, exitOK, r.code, "%s: %s", sp.Name, r)
		var out struct {
			ID                 string `json:"id"`
			Status             string `json:"status"`
			PreviousStatus     string `json:"previous_status"`
			FailureReason      string `json:"failure_reason"`
			Generation         *int64 `json:"generation"`
			PreviousGeneration *int64 `json:"previous_generation"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r)
		require.Equal(t, id, out.ID, sp.Name)
		require.Equal(t, "FAILED", out.Status)
		require.Equal(t, "QUEUED", out.PreviousStatus)
		require.Equal(t, "cancelled by operator: dup", out.FailureReason)
		require.EqualValues(t, 5, *out.Generation)
		require.EqualValues(t, 4, *out.PreviousGeneration)
	}

	r := b.run(t, "cancel", "not-a-uuid")
	require.Equal(t, exitUsage, r.code, r)
	r = jg(t, "cancle", "x")
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, `unknown command "cancle"; did you mean "cancel"?`)
	r = jg(t, "cancel", "--reson", "x", "y")
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, "did you mean --reason?")
}

// A reason that quotes a URL with its password (pasted from a worker's
// error) is stored as given, but the command prints it masked, in text and
// in JSON, as it masks the database URL's.
func TestCancel_PrintsTheReasonRedacted(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	server, err := url.Parse(b.env.DatabaseURL)
	require.NoError(t, err)
	dbURL := "postgres://postgres:Zq81Pw@127.0.0.1:" + server.Port() + "/test"
	for _, args := range [][]string{{}, {"--json"}} {
		id := b.jobs.Insert(t, fixture.Job{})
		base := append(append(tableArgs(b.jobs.Table), "--schema", b.env.Schema, "--prefix", b.env.Prefix,
			"--database-url", dbURL, "--markers", "redis", "--redis-url", b.env.RedisURL), args...)
		r := jg(t, append(append([]string{"cancel"}, base...), "--reason", "stuck on "+dbURL, id)...)
		require.Equal(t, exitOK, r.code, r)
		require.Contains(t, r.stdout, "stuck on postgres://")
		require.NotRegexp(t, leaked, r.stdout+r.stderr, "cancel %v", args)
	}
}

// The command's cancel stops the job's running execution through the
// workers' watchers: over Postgres by the notice its statement sends,
// over Redis with --notices redis; the cause says "cancelled".
func TestCancel_ReachesTheWorkersWatcher(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, fixture.Default)
			transport := watch.Transport{Postgres: b.env.Pool}
			var extra []string
			if kind == "redis" {
				transport, extra = watch.Transport{Redis: b.env.Redis}, []string{"--notices", "redis"}
			}
			w, err := watch.New(watch.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Transport: transport, CheckInterval: time.Hour})
			require.NoError(t, err)
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Run(ctx) }()
			t.Cleanup(func() { stop(); <-done })
			<-w.Ready()

			exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
			runCtx, release := w.Watch(context.Background(), exec)
			defer release()
			r := b.run(t, "cancel", append(extra, exec.JobID)...)
			require.Equal(t, exitOK, r.code, r)
			select {
			case <-runCtx.Done():
			case <-time.After(testenv.Patience):
				t.Fatal("the execution was not cancelled")
			}
			var lost *watch.LostError
			require.True(t, errors.As(context.Cause(runCtx), &lost), "%v", context.Cause(runCtx))
			require.Equal(t, watch.ViaNotice, lost.Via)
			require.True(t, lost.Cancelled)
		})
	}
}

// A cancel whose statement committed while the command's connection to
// PostgreSQL failed, so that the command never heard it, is still
// published on Redis: the command reads the row back and, finding it
// cancelled from the generation it read, publishes the notice and reports
// the cancel.
func TestCancel_CommittedUnheardIsPublishedOnRedis(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	w, err := watch.New(watch.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Transport: watch.Transport{Redis: b.env.Redis},
		CheckInterval: time.Hour})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	<-w.Ready()
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	runCtx, release := w.Watch(context.Background(), exec)
	defer release()

	gate := commitgate.New(t, b.env, b.jobs.Table.QualifiedName())
	args := b.args("--notices", "redis", exec.JobID)
	require.Equal(t, "--database-url", args[0])
	args[1] = gate.URL
	opened := make(chan error, 1)
	go func() { opened <- gate.Intercept(gate.Cut, false) }()
	r := jg(t, append([]string{"cancel"}, args...)...)
	require.NoError(t, <-opened)
	require.Equal(t, exitOK, r.code, r)
	require.Contains(t, r.stdout, "Job "+exec.JobID+": PROCESSING -> FAILED, generation 1 -> 2.")
	select {
	case <-runCtx.Done():
	case <-time.After(testenv.Patience):
		t.Fatal("the execution was not cancelled")
	}
	var lost *watch.LostError
	require.True(t, errors.As(context.Cause(runCtx), &lost), "%v", context.Cause(runCtx))
	require.Equal(t, watch.ViaNotice, lost.Via)
	require.True(t, lost.Cancelled)
}
