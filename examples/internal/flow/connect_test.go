package flow

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// connect connects to env's schema and Redis prefix with the notices
// given.
func connect(t *testing.T, env *testenv.Env, notices string) (Config, *Conns) {
	t.Helper()
	cfg := Config{DatabaseURL: env.DatabaseURL, RedisURL: env.RedisURL, Schema: env.Schema, Prefix: env.Prefix, Notices: notices}
	conns, err := Connect(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(conns.Close)
	return cfg, conns
}

// Connect creates the library's tables and the product tables in the
// schema, which is every connection's search_path.
func TestConnect_MigratesTheSchema(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	_, conns := connect(t, env, "")
	var tables int
	require.NoError(t, conns.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables
		WHERE schemaname = current_schema() AND tablename IN ('jobs', 'job_type_limits', 'usage_ledger',
			'job_artifacts', 'job_settlements', 'courses', 'videos', 'documents')`).Scan(&tables))
	require.Equal(t, 8, tables)
	require.Equal(t, env.Schema, conns.Schema)
}

// The transport follows Config.Notices: Redis by default, Postgres, or
// none when notices are off; anything else is refused.
func TestConnect_TransportFollowsNotices(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)

	_, conns := connect(t, env, "")
	tr, on := conns.Transport()
	require.True(t, on)
	require.Equal(t, watch.Transport{Redis: conns.Redis}, tr, "notices over Redis by default")

	_, conns = connect(t, env, NoticesPostgres)
	tr, on = conns.Transport()
	require.True(t, on)
	require.Equal(t, watch.Transport{Postgres: conns.Pool}, tr)

	_, conns = connect(t, env, NoticesOff)
	_, on = conns.Transport()
	require.False(t, on)

	_, err := Connect(context.Background(), Config{DatabaseURL: env.DatabaseURL, RedisURL: env.RedisURL,
		Schema: env.Schema, Prefix: env.Prefix, Notices: "pigeon"})
	require.ErrorContains(t, err, `notices "pigeon"`)
}

// RunWatcher returns once the watcher hears notices, over either
// transport, and Close stops it.
func TestConns_RunWatcherReturnsOnceSubscribed(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	for _, notices := range []string{NoticesRedis, NoticesPostgres} {
		cfg, conns := connect(t, env, notices)
		guard, err := jobguard.NewWithConfig(context.Background(), conns.Pool, jobguard.DefaultTable(),
			jobguard.GuardConfig{Shared: cfg.Shared()})
		require.NoError(t, err)
		tr, _ := conns.Transport()
		w, err := watch.New(watch.Config{Guard: guard, DB: conns.Pool, Transport: tr})
		require.NoError(t, err)
		require.NoError(t, conns.RunWatcher(context.Background(), w))
		require.True(t, w.Subscribed(), notices)
		conns.Close()
		require.False(t, w.Subscribed(), "Close stops the watcher")
	}
}

// Close cancels what Go started and waits for it, before the connections
// close.
func TestConns_CloseStopsWhatGoStarted(t *testing.T) {
	t.Parallel()
	_, conns := connect(t, testenv.New(t), "")
	var stoppedBeforeClose bool
	conns.Go(context.Background(), func(ctx context.Context) error {
		<-ctx.Done()
		stoppedBeforeClose = conns.Pool.Ping(context.Background()) == nil
		return nil
	})
	conns.Close()
	require.True(t, stoppedBeforeClose, "the loop ended while the pool still worked")
}

// Without a watcher, an execution's calls run under the caller's context.
func TestWatched_WithoutAWatcherTheContextIsTheCallers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	wctx, release := watched(ctx, nil, jobguard.Execution{JobID: "x", Generation: 1})
	release()
	require.Equal(t, ctx, wctx)
}

// A processor that fails its job itself says so (ErrGaveUp), so that a
// queue cancels the delivery instead of retrying it into a start the guard
// would refuse; the job is FAILED with the processor's reason.
func TestChapters_AnUnreadableCourseFailsTheJobAndGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, conns := connect(t, testenv.New(t), "")
	guard, err := jobguard.NewWithConfig(ctx, conns.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: cfg.Shared()})
	require.NoError(t, err)
	starts, err := jobguard.NewStartGuard(guard, conns.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	_, err = conns.Pool.Exec(ctx, `INSERT INTO courses (id, title) VALUES ('gone', 'Gone')`)
	require.NoError(t, err)
	jobID, err := EnqueueChapter(ctx, conns.Pool, "gone", 1)
	require.NoError(t, err)
	_, err = conns.Pool.Exec(ctx, `DELETE FROM courses WHERE id = 'gone'`) // deleted while queued
	require.NoError(t, err)

	c := &Chapters{Guard: guard, Starts: starts, DB: conns.Pool}
	_, err = c.Process(ctx, jobID)
	require.ErrorIs(t, err, ErrGaveUp)
	var status, reason string
	require.NoError(t, conns.Pool.QueryRow(ctx, `SELECT status, failure_reason FROM jobs WHERE id = $1`, jobID).Scan(&status, &reason))
	require.Equal(t, "FAILED", status)
	require.Equal(t, "chapter: course unreadable", reason)

	// A delivery that lost its job first cannot fail it: not ErrGaveUp.
	_, err = c.Process(ctx, jobID)
	require.NotErrorIs(t, err, ErrGaveUp)
	require.True(t, jobguard.IsPermanent(err), "refused at start")
}
