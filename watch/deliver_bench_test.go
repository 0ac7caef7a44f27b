package watch

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/google/uuid"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// What one watcher spends on a reclaim of 10,000 jobs, 200 of them its
// own: every watcher on the channel reads every notice, so a burst costs
// each process this much CPU, whatever share of it is its own. Against
// the plain JSON decoding of the same payloads.
func BenchmarkDeliverBurst(b *testing.B) {
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	w, err := New(Config{Guard: jobs.Guard, DB: env.Pool, Transport: Transport{Redis: env.Redis},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	notices := make([]Notice, 10_000)
	for i := range notices {
		notices[i] = Notice{JobID: uuid.NewString(), Generation: 1}
	}
	msgs, err := payloads(jobs.Guard.TableKey(), notices, RedisPayloadMax)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("baseline=json", func(b *testing.B) {
		for b.Loop() {
			for _, m := range msgs {
				var ws []wireNotice
				if err := json.Unmarshal([]byte(m), &ws); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("deliver", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			release := make([]context.CancelFunc, 200)
			for i, n := range notices[:len(release)] {
				_, release[i] = w.Watch(ctx, jobguard.Execution{JobID: n.JobID, Generation: 1})
			}
			b.StartTimer()
			for _, m := range msgs {
				w.deliver(ctx, m)
			}
			b.StopTimer()
			for _, r := range release {
				r()
			}
			b.StartTimer()
		}
	})
}
