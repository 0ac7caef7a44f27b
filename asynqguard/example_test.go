package asynqguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// A chapter handler behind the middleware: the first task's job completes;
// the second's was reclaimed, so it is refused before its handler runs, and
// asynq archives it instead of retrying.
func ExampleNew() {
	t, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(t) // a schema and a queue of the example's own
	guard := fixture.Create(t, env, fixture.Default).Guard
	ctx, pool, rdb, queue := context.Background(), env.Pool, env.Redis, env.Schema
	var healthy, reclaimed string
	_ = pool.QueryRow(ctx, `INSERT INTO jobs (type) VALUES ('chapter') RETURNING id`).Scan(&healthy)
	_ = pool.QueryRow(ctx, `INSERT INTO jobs (type, status, failure_reason) VALUES ('chapter', 'FAILED', $1) RETURNING id`,
		jobguard.ReclaimedReasonDefault).Scan(&reclaimed)

	starts, err := jobguard.NewStartGuard(guard, rdb, jobguard.StartGuardConfig{})
	if err != nil {
		panic(err)
	}
	mw, err := asynqguard.New(asynqguard.Config{StartGuard: starts, DB: pool})
	if err != nil {
		panic(err)
	}
	outcomes := make(chan error, 2)
	mux := asynq.NewServeMux()
	mux.Use(mw)
	mux.HandleFunc("chapter", func(ctx context.Context, _ *asynq.Task) error {
		exec, _ := asynqguard.Execution(ctx)
		// The model call goes here, before the save.
		err := guard.CompleteTx(ctx, pool, exec, func(tx pgx.Tx) error {
			return nil // save the chapters in tx
		})
		outcomes <- err
		return err
	})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: 20 * time.Millisecond,
		LogLevel:          asynq.ErrorLevel,
		// A job sent back to the queue (a rescue) uses up no retry.
		IsFailure: asynqguard.IsFailure,
		ErrorHandler: asynq.ErrorHandlerFunc(func(_ context.Context, _ *asynq.Task, err error) {
			outcomes <- err // every error asynq is given, refusals included
		}),
	})
	defer deleteQueue(rdb, queue)
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown()

	client := asynq.NewClientFromRedisClient(rdb)
	for _, id := range []string{healthy, reclaimed} {
		payload, _ := json.Marshal(map[string]string{"job_id": id})
		if _, err := client.Enqueue(asynq.NewTask("chapter", payload), asynq.Queue(queue)); err != nil {
			panic(err)
		}
		err := <-outcomes
		fmt.Println(err == nil, errors.Is(err, jobguard.ErrReclaimed), errors.Is(err, asynq.SkipRetry))
	}
	var status string
	_ = pool.QueryRow(ctx, `SELECT status FROM jobs WHERE id = $1`, healthy).Scan(&status)
	fmt.Println(status)
	// Output:
	// true false false
	// false true true
	// COMPLETED
}
