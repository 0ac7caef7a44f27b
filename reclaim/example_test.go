package reclaim_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// A reclaimer service: the limits live in the job_type_limits table (see
// Migration), a reclaimed chapter job fails its course, and a reclaimed
// export fails only the export, leaving its source READY.
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
	failCourse, err := reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Column: "status", Value: "FAILED", From: []string{"GENERATING"}})
	if err != nil {
		log.Fatal(err)
	}
	failExport, err := reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Column: "export_status", Value: "FAILED", From: []string{"QUEUED", "EXPORTING"}})
	if err != nil {
		log.Fatal(err)
	}
	r, err := reclaim.New(reclaim.Config{
		Guard:      guard,
		DB:         pool,
		Redis:      rdb,
		NoProgress: 15 * time.Minute,
		OnReclaim:  map[string]reclaim.ParentRule{"chapter": failCourse, "export": failExport},
	})
	if err != nil {
		log.Fatal(err)
	}
	// One instance leads; the others stand by and take over within a minute.
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// One pass, as a cron job or an operator's command would run it.
func ExampleReclaimer_Sweep() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
	if err != nil {
		log.Fatal(err)
	}
	r, err := reclaim.New(reclaim.Config{
		Guard:  guard,
		DB:     pool,
		Redis:  redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}),
		Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute, "video": 2 * time.Hour},
	})
	if err != nil {
		log.Fatal(err)
	}
	rep, err := r.Sweep(ctx)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("reclaimed %d (%v), lost the race %d, still progressing %d",
		rep.Reclaimed, rep.ReclaimedIDs, rep.LostRace, rep.Progressing)
}

// An export job's parent rule: the source row keeps its status (READY);
// only its export status moves to FAILED.
func ExampleSetParent() {
	failExport, err := reclaim.SetParent(reclaim.ParentUpdate{
		Table:  "courses",
		Column: "export_status",
		Value:  "FAILED",
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = reclaim.Config{OnReclaim: map[string]reclaim.ParentRule{"export": failExport}}
}
