package bullmq_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/bullmq"
)

// Reclaim the stuck jobs of a BullMQ queue whose job data carries the id of
// the job's row ({"jobId": "..."}).
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
	src, err := bullmq.New(bullmq.Config{Redis: rdb, Prefix: "{bull}", Queue: "chapters", RowIDField: "jobId"})
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
