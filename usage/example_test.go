package usage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

func ExampleAccrue() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	ctx := context.Background()
	pool := env.Pool
	env.Exec(usage.Migration)
	env.Exec(`CREATE TABLE accounts (id text PRIMARY KEY, video_seconds bigint NOT NULL);
	          INSERT INTO accounts VALUES ('acct-1', 0)`)
	exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1}), Generation: 1}

	// Only a confirmed finalize can be billed.
	fin, err := jobs.Guard.Finalize(ctx, pool, exec, jobguard.FinalizeSpec{})
	if err != nil {
		fmt.Println(err)
		return
	}
	entry := usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: 90}
	increment := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET video_seconds = video_seconds + $1 WHERE id = $2`, entry.Quantity, entry.Account)
		return err
	}
	for range 2 { // a replay finds the earlier accrual
		acc, err := usage.Accrue(ctx, pool, fin, entry, increment)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("accrued:", acc.Accrued)
	}
	var seconds int64
	_ = pool.QueryRow(ctx, `SELECT video_seconds FROM accounts WHERE id = 'acct-1'`).Scan(&seconds)
	fmt.Println("billed seconds:", seconds)

	// A zero (or rejected, or not confirmed) Finalized is refused.
	_, err = usage.Accrue(ctx, pool, jobguard.Finalized{}, entry, increment)
	fmt.Println(errors.Is(err, usage.ErrNotConfirmed))
	// Output:
	// accrued: true
	// accrued: false
	// billed seconds: 90
	// true
}

func ExampleNewLedger() {
	// A ledger table of your own, with the bundled migration's columns.
	ledger, err := usage.NewLedger(usage.Config{Schema: "billing", Table: "UsageLedger"})
	fmt.Println(ledger != nil, err)

	_, err = usage.NewLedger(usage.Config{Table: strings.Repeat("x", 64)})
	fmt.Println(err != nil)
	// Output:
	// true <nil>
	// true
}

func ExampleCounter() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	ctx := context.Background()
	pool := env.Pool
	env.Exec(usage.Migration)
	env.Exec(`CREATE TABLE accounts (id text PRIMARY KEY, video_seconds bigint NOT NULL DEFAULT 0)`)

	// The meter video_seconds is totalled per account in accounts: the
	// ledger row and the total are one statement, and the account's row
	// is inserted by its first accrual.
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_seconds": {Table: "accounts", Key: "id", Column: "video_seconds"},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, seconds := range []int64{90, 30} {
		exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1}), Generation: 1}
		fin, err := jobs.Guard.Finalize(ctx, pool, exec, jobguard.FinalizeSpec{})
		if err != nil {
			fmt.Println(err)
			return
		}
		entry := usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: seconds}
		for range 2 { // a replay adds nothing
			acc, err := ledger.Accrue(ctx, pool, fin, entry, nil)
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Println("accrued:", acc.Accrued)
		}
	}
	var seconds int64
	_ = pool.QueryRow(ctx, `SELECT video_seconds FROM accounts WHERE id = 'acct-1'`).Scan(&seconds)
	fmt.Println("billed seconds:", seconds)
	// Output:
	// accrued: true
	// accrued: false
	// accrued: true
	// accrued: false
	// billed seconds: 120
}
