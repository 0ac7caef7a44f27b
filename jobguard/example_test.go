package jobguard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// A worker starts a job, the reclaimer fails it while the model call is
// still running, and the late result is refused before any row is saved.
func Example() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	ctx := context.Background()
	pool := env.Pool

	if _, err := pool.Exec(ctx, jobguard.Migration+marker.Migration+`
		CREATE TABLE chapters (job_id uuid, title text)`); err != nil {
		panic(err)
	}
	// Every process of the table builds its guard with the same shared
	// settings. Left at their defaults, the reclaim markers live in the
	// database, beside the jobs: no Redis is needed.
	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
	if err != nil {
		panic(err)
	}
	starts, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{})
	if err != nil {
		panic(err)
	}
	var jobID string
	if err := pool.QueryRow(ctx, `INSERT INTO jobs (type) VALUES ('chapter') RETURNING id::text`).Scan(&jobID); err != nil {
		panic(err)
	}

	exec, err := starts.Start(ctx, pool, jobID)
	fmt.Println("started generation", exec.Generation, err)

	// While the model call hangs, the reclaimer fails the job.
	if err := guard.Fail(ctx, pool, exec, jobguard.ReclaimedReasonDefault); err != nil {
		panic(err)
	}

	// The call returns; the save transaction is refused at its first write.
	err = guard.CompleteTx(ctx, pool, exec, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO chapters VALUES ($1, 'Week 1')`, jobID)
		return err
	})
	var se *jobguard.StateError
	fmt.Println("terminal:", errors.Is(err, jobguard.ErrJobTerminal), errors.As(err, &se) && se.Status == "FAILED")
	fmt.Println("permanent:", jobguard.IsPermanent(err))

	var chapters int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM chapters`).Scan(&chapters)
	fmt.Println("chapters saved:", chapters)

	// The queue redelivers the job: the start guard refuses it for good.
	_, err = starts.Start(ctx, pool, jobID)
	fmt.Println("redelivery refused:", errors.Is(err, jobguard.ErrReclaimed))
	// Output:
	// started generation 1 <nil>
	// terminal: true true
	// permanent: true
	// chapters saved: 0
	// redelivery refused: true
}

// A metadata update fails after the completion committed; Resume runs it
// again later and confirms the finalize, so its usage can still be billed.
func ExampleGuard_Resume() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	ctx := context.Background()
	pool := env.Pool
	if _, err := pool.Exec(ctx, jobguard.Migration); err != nil {
		panic(err)
	}
	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
	if err != nil {
		panic(err)
	}
	var jobID string
	if err := pool.QueryRow(ctx, `INSERT INTO jobs (type, status, generation) VALUES ('video', 'PROCESSING', 1)
		RETURNING id::text`).Scan(&jobID); err != nil {
		panic(err)
	}
	exec := jobguard.Execution{JobID: jobID, Generation: 1}
	storeUp := false
	publish := jobguard.Update{Name: "content", Run: func(context.Context) error {
		if !storeUp {
			return errors.New("content store unavailable")
		}
		return nil // idempotent: publishing twice is publishing
	}}

	fin, err := guard.Finalize(ctx, pool, exec, jobguard.FinalizeSpec{Updates: []jobguard.Update{publish}})
	fmt.Println("completed:", fin.Completed(), "confirmed:", fin.Confirmed(), "failed:", fin.Failed(), err != nil)

	storeUp = true
	fin, err = guard.Resume(ctx, pool, exec, jobguard.FinalizeSpec{Updates: []jobguard.Update{publish}})
	fmt.Println("resumed, confirmed:", fin.Confirmed(), err)

	// Another execution's Resume is refused: it never completed the job.
	_, err = guard.Resume(ctx, pool, jobguard.Execution{JobID: jobID, Generation: 2}, jobguard.FinalizeSpec{})
	fmt.Println("other execution:", errors.Is(err, jobguard.ErrJobTerminal))
	// Output:
	// completed: true confirmed: false failed: [content] true
	// resumed, confirmed: true <nil>
	// other execution: true
}

// Every spelling of a job's id names one job: the guard reads it as the id
// column does and keys everything by the spelling the column prints. A
// job is a job of one table, which TableKey names.
func ExampleGuard_CanonicalID() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, jobguard.Migration); err != nil {
		panic(err)
	}
	guard, err := jobguard.New(ctx, env.Pool, jobguard.DefaultTable())
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"{7C9E6679-7425-40DE-944B-E07FC1F90AE7}", "7c9e6679742540de944be07fc1f90ae7", "not-a-uuid"} {
		canonical, err := guard.CanonicalID(id)
		fmt.Printf("%q %v\n", canonical, errors.Is(err, jobguard.ErrInvalidJobID))
	}
	fmt.Println(guard.TableKey() == `"`+env.Schema+`"."jobs"`)
	// Output:
	// "7c9e6679-7425-40de-944b-e07fc1f90ae7" false
	// "7c9e6679-7425-40de-944b-e07fc1f90ae7" false
	// "" true
	// true
}
