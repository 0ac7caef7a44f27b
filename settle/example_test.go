package settle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

func ExampleSettler_Finalize() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	env.Exec(usage.Migration + settle.Migration + `
		CREATE TABLE videos (id text PRIMARY KEY, status text NOT NULL DEFAULT 'ENCODING');
		CREATE TABLE accounts (id text PRIMARY KEY, video_seconds bigint NOT NULL DEFAULT 0);
		INSERT INTO videos (id) VALUES ('video-1');
		INSERT INTO accounts (id) VALUES ('acct-1')`)
	ctx, pool := context.Background(), env.Pool

	s, err := settle.New(ctx, settle.Config{
		Guard: jobs.Guard, DB: pool,
		Handlers: map[string]settle.Handler{
			// Idempotent: setting READY twice is READY.
			"video": func(ctx context.Context, _ jobguard.Execution, args json.RawMessage) error {
				var videoID string
				if err := json.Unmarshal(args, &videoID); err != nil {
					return err
				}
				_, err := pool.Exec(ctx, `UPDATE videos SET status = 'READY' WHERE id = $1`, videoID)
				return err
			},
		},
		Increments: map[string]settle.Increment{
			// Runs once per (job, meter), in the billing transaction.
			"video_seconds": func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
				_, err := tx.Exec(ctx, `UPDATE accounts SET video_seconds = video_seconds + $1 WHERE id = $2`, e.Quantity, e.Account)
				return err
			},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1, Type: "video"}), Generation: 1}

	res, err := s.Finalize(ctx, pool, exec, settle.Spec{
		Updates: []settle.Update{{Name: "video", Args: "video-1"}},
		Usage:   []usage.Entry{{Account: "acct-1", Meter: "video_seconds", Quantity: 90}},
	})
	fmt.Println("confirmed:", res.Finalized.Confirmed(), "settled:", res.Settled, "billed now:", res.Accruals[0].Accrued, err)

	var status string
	var seconds int64
	_ = pool.QueryRow(ctx, `SELECT (SELECT status FROM videos), (SELECT video_seconds FROM accounts)`).Scan(&status, &seconds)
	fmt.Println(status, seconds)
	// Output:
	// confirmed: true settled: true billed now: true <nil>
	// READY 90
}

// A metadata store is down when the worker finalizes: the job completes,
// its record stays pending, and a sweep finishes it once the store is back.
func ExampleSettler_Sweep() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	env.Exec(usage.Migration + settle.Migration + `
		CREATE TABLE accounts (id text PRIMARY KEY, video_seconds bigint NOT NULL DEFAULT 0);
		INSERT INTO accounts (id) VALUES ('acct-1')`)
	ctx, pool := context.Background(), env.Pool

	storeDown := true
	s, err := settle.New(ctx, settle.Config{
		Guard: jobs.Guard, DB: pool, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond,
		Logger: discard(),
		Handlers: map[string]settle.Handler{
			"publish": func(context.Context, jobguard.Execution, json.RawMessage) error {
				if storeDown {
					return errors.New("content store unavailable")
				}
				return nil
			},
		},
		Increments: map[string]settle.Increment{
			"video_seconds": func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
				_, err := tx.Exec(ctx, `UPDATE accounts SET video_seconds = video_seconds + $1 WHERE id = $2`, e.Quantity, e.Account)
				return err
			},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1, Type: "video"}), Generation: 1}
	_, err = s.Finalize(ctx, pool, exec, settle.Spec{
		Updates: []settle.Update{{Name: "publish"}},
		Usage:   []usage.Entry{{Account: "acct-1", Meter: "video_seconds", Quantity: 90}},
	})
	fmt.Println("left to the sweep:", errors.Is(err, settle.ErrPending))

	storeDown = false
	time.Sleep(5 * time.Millisecond) // BackoffMin
	rep, err := s.Sweep(ctx)
	fmt.Printf("%+v %v\n", rep, err)
	var seconds int64
	_ = pool.QueryRow(ctx, `SELECT video_seconds FROM accounts`).Scan(&seconds)
	fmt.Println("billed seconds:", seconds)
	// Output:
	// left to the sweep: true
	// {Taken:1 Settled:1 Raced:0 Retrying:0 GivenUp:0 Unregistered:0 Updates:1 Accrued:1} <nil>
	// billed seconds: 90
}

// A record whose update keeps failing is given up after MaxAttempts, never
// billed; once the cause is fixed, an operator reopens it.
func ExampleSettler_Reopen() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	env.Exec(usage.Migration + settle.Migration)
	ctx, pool := context.Background(), env.Pool

	broken := true
	s, err := settle.New(ctx, settle.Config{
		Guard: jobs.Guard, DB: pool, MaxAttempts: 1, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond,
		Logger: discard(),
		Handlers: map[string]settle.Handler{
			"publish": func(context.Context, jobguard.Execution, json.RawMessage) error {
				if broken {
					return errors.New("content store rejects the document")
				}
				return nil
			},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1, Type: "video"}), Generation: 1}
	_, _ = s.Finalize(ctx, pool, exec, settle.Spec{Updates: []settle.Update{{Name: "publish"}}})
	time.Sleep(5 * time.Millisecond)
	rep, _ := s.Sweep(ctx)
	fmt.Println("given up:", rep.GivenUp)

	broken = false
	fmt.Println("reopen:", s.Reopen(ctx, exec))
	rep, _ = s.Sweep(ctx)
	fmt.Println("settled:", rep.Settled)
	// Output:
	// given up: 1
	// reopen: <nil>
	// settled: 1
}
