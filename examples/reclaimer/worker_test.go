package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// worker is a worker process's share of the library, as the examples'
// workers build it, for the tests to start, beat and record the jobs the
// service sweeps.
type worker struct {
	pool      *pgxpool.Pool
	guard     *jobguard.Guard
	starts    *jobguard.StartGuard
	heartbeat *heartbeat.Heartbeat
	artifacts *compensate.Artifacts
	// watcher is nil when notices are off. It checks its rows only hourly,
	// so only a notice cancels its executions within a test.
	watcher *watch.Watcher
}

// newWorker connects to env's schema and Redis prefix, with the notices
// given (flow.NoticesOff, say), and builds a worker's parts, their metrics
// on mp (nil: none).
func newWorker(t *testing.T, env *testenv.Env, notices string, mp metric.MeterProvider) *worker {
	t.Helper()
	ctx := context.Background()
	cfg := flow.Config{DatabaseURL: env.DatabaseURL, RedisURL: env.RedisURL, Schema: env.Schema, Prefix: env.Prefix, Notices: notices}
	conns, err := flow.Connect(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(conns.Close)
	w := &worker{pool: conns.Pool}
	w.guard, err = jobguard.NewWithConfig(ctx, conns.Pool, jobguard.DefaultTable(),
		jobguard.GuardConfig{Shared: cfg.Shared(), MeterProvider: mp})
	require.NoError(t, err)
	w.starts, err = jobguard.NewStartGuard(w.guard, conns.Redis, jobguard.StartGuardConfig{MeterProvider: mp})
	require.NoError(t, err)
	w.heartbeat = heartbeat.New(w.guard, heartbeat.Config{MeterProvider: mp})
	w.artifacts, err = compensate.New(ctx, compensate.Config{Guard: w.guard, DB: conns.Pool,
		Compensators: flow.Compensators(), MeterProvider: mp})
	require.NoError(t, err)
	if transport, on := conns.Transport(); on {
		w.watcher, err = watch.New(watch.Config{Guard: w.guard, DB: conns.Pool, Transport: transport, CheckInterval: time.Hour})
		require.NoError(t, err)
		require.NoError(t, conns.RunWatcher(ctx, w.watcher))
	}
	return w
}
