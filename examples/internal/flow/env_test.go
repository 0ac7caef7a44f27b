package flow

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// Open builds the publisher and the process's watcher for the transport
// chosen, none when notices are off, and no watcher for a process that
// runs no executions.
func TestOpen_NoticesAndWatcher(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	open := func(cfg Config) (*Env, error) {
		cfg.DatabaseURL, cfg.RedisURL, cfg.Schema, cfg.Prefix = env.DatabaseURL, env.RedisURL, env.Schema, env.Prefix
		e, err := Open(context.Background(), cfg)
		if err == nil {
			t.Cleanup(e.Close)
		}
		return e, err
	}

	e, err := open(Config{})
	require.NoError(t, err)
	require.ErrorIs(t, e.Notices.PublishOn(context.Background(), e.Pool), watch.ErrNotTransactional, "notices over Redis")
	require.NotNil(t, e.Watcher)
	require.True(t, e.Watcher.Subscribed(), "Open returns once the watcher hears notices")
	require.Nil(t, e.WithoutWatcher().Watcher)
	require.NotNil(t, e.Watcher, "WithoutWatcher leaves e alone")

	e, err = open(Config{Notices: NoticesPostgres})
	require.NoError(t, err)
	require.NoError(t, e.Notices.PublishOn(context.Background(), e.Pool), "notices over Postgres")
	require.True(t, e.Watcher.Subscribed())

	e, err = open(Config{NoWatcher: true})
	require.NoError(t, err)
	require.NotNil(t, e.Notices)
	require.Nil(t, e.Watcher)

	e, err = open(Config{Notices: NoticesOff})
	require.NoError(t, err)
	require.Nil(t, e.Notices)
	require.Nil(t, e.Watcher)
	ctx := context.Background()
	wctx, release := e.Watch(ctx, jobguard.Execution{JobID: "x", Generation: 1})
	release()
	require.Equal(t, ctx, wctx, "without a watcher the context is the caller's")

	_, err = open(Config{Notices: "pigeon"})
	require.ErrorContains(t, err, `notices "pigeon"`)
}
