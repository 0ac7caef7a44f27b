package jobguard_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// reclaim puts a job where the reclaimer leaves it: FAILED with the
// reclaimed reason, and a marker for its generation.
func reclaim(t *testing.T, jobs *fixture.Jobs, sg *jobguard.StartGuard, exec jobguard.Execution) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, jobs.Guard.Fail(ctx, jobs.Env.Pool, exec, jobguard.ReclaimedReasonDefault+" (ran 31m, limit 30m)"))
	require.NoError(t, sg.Markers().Write(ctx, marker.Marker{JobID: exec.JobID, Generation: exec.Generation, Reason: jobguard.ReclaimedReasonDefault}))
}

func TestStartGuard_RefusesOnDatabaseReason(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
		// A late writer flipped the status back but left the reason: no marker
		// is needed to refuse.
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued, Reason: jobguard.ReclaimedReasonDefault + " (ran 2h)"})
		err := sg.Check(ctx, jobs.Env.Pool, id)
		var re *jobguard.ReclaimedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "database", re.Source)

		before := jobs.Read(t, id)
		_, err = sg.Start(ctx, jobs.Env.Pool, id)
		require.ErrorAs(t, err, &re)
		require.Equal(t, "database", re.Source)
		require.True(t, jobguard.IsPermanent(err))
		require.Equal(t, before, jobs.Read(t, id))
	})
}

func TestStartGuard_RefusesOnMarkerAloneAfterLateWriterOverwroteReason(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
		exec, err := sg.Start(ctx, db, id)
		require.NoError(t, err)
		reclaim(t, jobs, sg, exec)

		// A late worker that does not use the guard overwrites the row.
		jobs.Env.Exec(sqlf("UPDATE %s SET %s = $1, %s = NULL", jobs.Table.QualifiedName(),
			quote(jobs.Table.StatusColumn), quote(jobs.Table.FailureReasonColumn)), jobs.Table.Statuses.Processing)

		err = sg.Check(ctx, db, id)
		var re *jobguard.ReclaimedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "marker", re.Source)
		_, err = sg.Start(ctx, db, id)
		require.ErrorAs(t, err, &re)
		require.Equal(t, "marker", re.Source)
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status)
	})
}

func TestStartGuard_RedisDownFailOpenPassesWithWarning(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	var logs bytes.Buffer
	sg, err := jobguard.NewStartGuard(jobs.Guard, deadRedis(t), jobguard.StartGuardConfig{
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	require.NoError(t, err)
	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})

	exec, err := sg.Start(ctx, env.Pool, id)
	require.NoError(t, err)
	require.Equal(t, int64(1), exec.Generation)
	require.Contains(t, logs.String(), `"level":"WARN"`)
	require.Contains(t, logs.String(), `"job_id":"`+id+`"`)
	require.Contains(t, logs.String(), `"lookup":"marker"`)

	// The database reason still refuses a reclaimed job with Redis down.
	reclaimed := jobs.Insert(t, fixture.Job{Status: "FAILED", Reason: jobguard.ReclaimedReasonDefault})
	_, err = sg.Start(ctx, env.Pool, reclaimed)
	require.ErrorIs(t, err, jobguard.ErrReclaimed)
}

func TestStartGuard_RedisDownFailClosedRefusesRetryably(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	sg, err := jobguard.NewStartGuard(jobs.Guard, deadRedis(t), jobguard.StartGuardConfig{OnLookupError: jobguard.FailClosed})
	require.NoError(t, err)
	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	before := jobs.Read(t, id)

	_, err = sg.Start(ctx, env.Pool, id)
	require.ErrorIs(t, err, jobguard.ErrGuardUnavailable)
	require.False(t, jobguard.IsPermanent(err), "a lookup failure must leave the job retryable")
	require.Equal(t, before, jobs.Read(t, id))
	require.ErrorIs(t, sg.Check(ctx, env.Pool, id), jobguard.ErrGuardUnavailable)
}

func TestStartGuard_GarbageMarkerIsALookupFailure(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	open := newStartGuard(t, jobs, jobguard.StartGuardConfig{Logger: slog.New(slog.DiscardHandler)})
	closed := newStartGuard(t, jobs, jobguard.StartGuardConfig{OnLookupError: jobguard.FailClosed})
	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	require.NoError(t, env.Redis.Set(ctx, open.Markers().Key(id), "{not json", 0).Err())

	_, _, err := open.Markers().Read(ctx, id)
	require.ErrorIs(t, err, marker.ErrUnreadable)
	_, err = closed.Start(ctx, env.Pool, id)
	require.ErrorIs(t, err, jobguard.ErrGuardUnavailable)
	_, err = open.Start(ctx, env.Pool, id)
	require.NoError(t, err)
}

func TestStartGuard_ConcurrentStartsGetDistinctGenerations(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Config{MaxConns: 8})
	jobs := fixture.Create(t, env, fixture.Default)
	sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	const n = 16
	gens := make(chan int64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			exec, err := sg.Start(context.Background(), env.Pool, id)
			require.NoError(t, err)
			gens <- exec.Generation
		})
	}
	wg.Wait()
	close(gens)
	seen := map[int64]bool{}
	for g := range gens {
		require.False(t, seen[g], "generation %d handed out twice", g)
		seen[g] = true
	}
	require.Equal(t, int64(n), jobs.Read(t, id).Generation)
}

// deadRedis is a client of a port where nothing listens.
func deadRedis(t *testing.T) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestStartGuard_UpperCaseUUIDFindsTheMarker(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})

	exec, err := sg.Start(ctx, env.Pool, strings.ToUpper(id))
	require.NoError(t, err)
	require.Equal(t, id, exec.JobID, "the execution names the job as the column prints it")

	// The reclaimer keys the marker by the canonical id; with no database
	// reason, only the marker can refuse.
	require.NoError(t, sg.Markers().Write(ctx, marker.Marker{JobID: id, Generation: exec.Generation, Reason: jobguard.ReclaimedReasonDefault}))
	_, err = sg.Start(ctx, env.Pool, strings.ToUpper(id))
	require.ErrorIs(t, err, jobguard.ErrReclaimed)
	require.ErrorIs(t, sg.Check(ctx, env.Pool, strings.ToUpper(id)), jobguard.ErrReclaimed)
}
