package main

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/watch"
)

// worker is the library's share of a worker process of the demo: the demo
// itself, and the worker process of scene 6. Its processors are built per
// scene by chapters and videos.
type worker struct {
	pool      *pgxpool.Pool
	guard     *jobguard.Guard
	starts    *jobguard.StartGuard
	heartbeat *heartbeat.Heartbeat
	artifacts *compensate.Artifacts
	settler   *settle.Settler
	// watcher is nil in a process with notices off.
	watcher *watch.Watcher
	// files receives the encoded videos.
	files string
	log   *slog.Logger
}

// wire builds the parts of the library a worker uses, each from the ones
// before it: the guard over the jobs table, with the settings every
// process of the demo shares; the start guard; the heartbeat; the
// artifacts, with the examples' compensators; the settler, with the
// video's metadata updates and billing (before, when set, runs before
// each update: scene 6 kills its worker process there); and the process's
// watcher, unless notices are off. What it starts runs until conns.Close.
func wire(ctx context.Context, conns *flow.Conns, cfg flow.Config, files string, log *slog.Logger,
	before func(ctx context.Context, update string)) (*worker, error) {
	guard, err := jobguard.NewWithConfig(ctx, conns.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: cfg.Shared()})
	if err != nil {
		return nil, err
	}
	w := &worker{pool: conns.Pool, guard: guard, files: files, log: log}
	if w.starts, err = jobguard.NewStartGuard(guard, conns.Redis, jobguard.StartGuardConfig{Logger: log}); err != nil {
		return nil, err
	}
	w.heartbeat = heartbeat.New(guard, heartbeat.Config{Interval: beatEvery, Logger: log})
	w.artifacts, err = compensate.New(ctx, compensate.Config{Guard: guard, DB: conns.Pool,
		Compensators: flow.Compensators(), Logger: log})
	if err != nil {
		return nil, err
	}
	w.settler, err = settle.New(ctx, settle.Config{Guard: guard, DB: conns.Pool, Grace: settleGrace,
		Handlers: flow.VideoHandlers(conns.Pool, before), Increments: flow.VideoIncrements(), Logger: log})
	if err != nil {
		return nil, err
	}
	if transport, notices := conns.Transport(); notices {
		// One subscription for the process: a reclaim's notice cancels the
		// model call or the encode of the execution that lost its job.
		if w.watcher, err = watch.New(watch.Config{Guard: guard, DB: conns.Pool, Transport: transport, Logger: log}); err != nil {
			return nil, err
		}
		if err := conns.RunWatcher(ctx, w.watcher); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// chapters returns a chapter processor of w whose model is model.
func (w *worker) chapters(model sim.Model) *flow.Chapters {
	return &flow.Chapters{Guard: w.guard, Starts: w.starts, DB: w.pool, Watcher: w.watcher, Model: model}
}

// videos returns a video processor of w whose encoder is enc.
func (w *worker) videos(enc sim.Encoder) *flow.Videos {
	return &flow.Videos{Guard: w.guard, Starts: w.starts, DB: w.pool, Heartbeat: w.heartbeat, Watcher: w.watcher,
		Artifacts: w.artifacts, Settler: w.settler, FilesDir: w.files, Log: w.log, Encoder: enc}
}
