package riversource_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivermigrate"

	"github.com/jobguard/jobguard/internal/testkit/sourcetest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim/riversource"
)

// BenchmarkActive reads 1,000 running River jobs through the source, beside
// a plain query of the same rows and columns that parses nothing.
func BenchmarkActive(b *testing.B) {
	ctx := context.Background()
	env := testenv.New(b)
	m := migrator(b, env)
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	env.Exec(`INSERT INTO river_job (kind, queue, args, state, attempt, max_attempts, attempted_at)
		SELECT 'chapter', 'default', jsonb_build_object('job_id', gen_random_uuid()::text, 'weeks', 2),
		       'running', 1, 25, now() - i * interval '1 second'
		FROM generate_series(1, 1000) AS i`)

	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			rows, err := env.Pool.Query(ctx, `SELECT id, kind, attempted_at, args FROM river_job WHERE state = 'running' ORDER BY id`)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for rows.Next() {
				var id int64
				var kind string
				var at time.Time
				var args []byte
				if err := rows.Scan(&id, &kind, &at, &args); err != nil {
					b.Fatal(err)
				}
				n++
			}
			if rows.Err() != nil || n != 1000 {
				b.Fatal(rows.Err(), n)
			}
		}
	})
	b.Run("source", func(b *testing.B) {
		src, err := riversource.New(riversource.Config{DB: env.Pool, Schema: env.Schema})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			jobs, err := sourcetest.All(ctx, src, 1000)
			if err != nil || len(jobs) != 1000 {
				b.Fatal(err, len(jobs))
			}
		}
	})
}
