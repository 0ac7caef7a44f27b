package watch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/watch"
)

// Watch and release, against the context.WithCancelCause it wraps.
func BenchmarkWatch(b *testing.B) {
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	w, err := watch.New(watch.Config{Guard: jobs.Guard, DB: env.Pool, Transport: watch.Transport{Redis: env.Redis}})
	require.NoError(b, err)
	exec := jobguard.Execution{JobID: "00000000-0000-0000-0000-000000000001", Generation: 1}
	ctx := context.Background()
	b.Run("baseline=WithCancelCause", func(b *testing.B) {
		for b.Loop() {
			_, cancel := context.WithCancelCause(ctx)
			cancel(nil)
		}
	})
	b.Run("watch", func(b *testing.B) {
		for b.Loop() {
			_, release := w.Watch(ctx, exec)
			release()
		}
	})
}

// One check of n watched executions, against the plain Snapshot query it
// runs.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		env := testenv.New(b)
		jobs := fixture.Create(b, env, fixture.Default)
		w, err := watch.New(watch.Config{Guard: jobs.Guard, DB: env.Pool, Transport: watch.Transport{Redis: env.Redis}})
		require.NoError(b, err)
		ctx := context.Background()
		rows, err := env.Pool.Query(ctx,
			`INSERT INTO jobs (type, status, generation) SELECT 'chapter', 'PROCESSING', 1 FROM generate_series(1, $1) RETURNING id::text`, n)
		require.NoError(b, err)
		var ids []string
		for rows.Next() {
			var id string
			require.NoError(b, rows.Scan(&id))
			ids = append(ids, id)
			_, release := w.Watch(ctx, jobguard.Execution{JobID: id, Generation: 1})
			defer release()
		}
		require.NoError(b, rows.Err())
		b.Run(fmt.Sprintf("n=%d/baseline=snapshot", n), func(b *testing.B) {
			for b.Loop() {
				_, err := jobset.New(jobs.Guard).Snapshot(ctx, env.Pool, ids)
				require.NoError(b, err)
			}
		})
		b.Run(fmt.Sprintf("n=%d/check", n), func(b *testing.B) {
			for b.Loop() {
				cancelled, err := w.Check(ctx)
				require.NoError(b, err)
				require.Zero(b, cancelled)
			}
		})
	}
}

// From Publish to the watched context's cancellation, per transport: the
// latency of the notice path, against a plain round trip of the transport.
func BenchmarkNoticeToCancel(b *testing.B) {
	for _, kind := range transports {
		b.Run(kind, func(b *testing.B) {
			env := testenv.New(b)
			jobs := fixture.Create(b, env, fixture.Default)
			tr := transportFor(env, kind)
			w, err := watch.New(watch.Config{Guard: jobs.Guard, DB: env.Pool, Transport: tr, CheckInterval: time.Hour})
			require.NoError(b, err)
			pub, err := watch.NewPublisher(jobs.Guard, tr)
			require.NoError(b, err)
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = w.Run(ctx); close(done) }()
			defer func() { stop(); <-done }()
			for !w.Subscribed() {
				time.Sleep(time.Millisecond)
			}
			exec := jobguard.Execution{JobID: jobs.Insert(b, fixture.Job{Generation: 1}), Generation: 1}
			b.Run("baseline=ping", func(b *testing.B) {
				for b.Loop() {
					if kind == "redis" {
						require.NoError(b, env.Redis.Ping(ctx).Err())
					} else {
						require.NoError(b, env.Pool.Ping(ctx))
					}
				}
			})
			b.Run("publish-to-cancel", func(b *testing.B) {
				for b.Loop() {
					watched, release := w.Watch(ctx, exec)
					require.NoError(b, pub.Publish(ctx, watch.Notice{JobID: exec.JobID, Generation: 1}))
					<-watched.Done()
					release()
				}
			})
		})
	}
}
