package marker_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// An operator's look at a job's reclaim marker in the default store, the
// marker table, and its removal.
func ExampleNewPostgresStore() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// marker.Migration must have been applied before the guard is built.
	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
	if err != nil {
		log.Fatal(err)
	}
	markers, err := marker.NewPostgresStore(guard, marker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	jobID := "7C9E6679-7425-40DE-944B-E07FC1F90AE7" // any spelling: the store keys the canonical one
	m, found, err := markers.Read(ctx, pool, jobID)
	if err != nil {
		log.Fatal(err)
	}
	if found {
		log.Printf("job %s was reclaimed at generation %d: %s", m.JobID, m.Generation, m.Reason)
		if err := markers.Delete(ctx, pool, jobID); err != nil {
			log.Fatal(err)
		}
	}
}

// Markers in Redis, under the guard's Shared.Prefix.
func ExampleNewRedisStore() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	guard, err := jobguard.NewWithConfig(ctx, pool, jobguard.DefaultTable(),
		jobguard.GuardConfig{Shared: jobguard.Shared{Markers: jobguard.MarkersRedis}})
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{os.Getenv("REDIS_ADDR")}})
	defer rdb.Close()
	markers, err := marker.NewRedisStore(guard, rdb, marker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("the job's marker lives at %s", markers.Key("7c9e6679-7425-40de-944b-e07fc1f90ae7"))
}
