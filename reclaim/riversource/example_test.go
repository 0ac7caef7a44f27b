package riversource_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/riversource"
)

// Reclaim the stuck jobs of a River queue whose job args carry the id of the
// job's row ({"job_id": "..."}), with River's kinds as the job types.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
	if err != nil {
		log.Fatal(err)
	}
	src, err := riversource.New(riversource.Config{
		DB:     pool,
		Queues: []string{"chapters"},
		Types:  map[string]string{"chapter_weeks": "chapter"},
	})
	if err != nil {
		log.Fatal(err)
	}
	r, err := reclaim.New(reclaim.Config{Guard: guard, DB: pool, Redis: rdb, Source: src})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
