package compensate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

func ExampleArtifacts_Finalize() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	env.Exec(compensate.Migration)
	ctx, pool := context.Background(), env.Pool

	arts, err := compensate.New(ctx, compensate.Config{
		Guard: jobs.Guard,
		DB:    pool,
		Compensators: map[string]compensate.Func{
			// Deleting a file must be idempotent: a missing file is done.
			"file": func(ctx context.Context, _ pgx.Tx, a compensate.Artifact) error {
				fmt.Println("remove", a.Ref)
				return nil
			},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1}), Generation: 1}

	// Record before creating the file, then encode.
	if err := arts.Record(ctx, pool, exec, "file", "videos/v1.mp4"); err != nil {
		fmt.Println(err)
		return
	}
	// Meanwhile the job was reclaimed.
	_ = jobs.Guard.Fail(ctx, pool, exec, jobguard.ReclaimedReasonDefault)

	fin, err := arts.Finalize(ctx, pool, exec, jobguard.FinalizeSpec{})
	fmt.Println("rejected:", fin.Rejected(), errors.Is(err, jobguard.ErrJobTerminal))

	// A sweep beside the reclaimer finds nothing left to do.
	rep, err := arts.Compensate(ctx)
	fmt.Printf("%+v %v\n", rep, err)
	// Output:
	// remove videos/v1.mp4
	// rejected: true true
	// {Kept:0 Rejected:0 Compensated:0 Rechecked:0 Spared:0 Failed:0} <nil>
}

// A reclaimed execution whose object the sweep already removed learns it
// from Record, before it uploads the object again; and an object it left
// in flight is removed by the second compensation, RecheckAfter later by
// the database's clock.
func ExampleArtifacts_Record() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	env.Exec(compensate.Migration)
	ctx, pool := context.Background(), env.Pool

	arts, err := compensate.New(ctx, compensate.Config{
		Guard: jobs.Guard, DB: pool, RecheckAfter: 10 * time.Minute,
		Compensators: map[string]compensate.Func{
			"object": func(ctx context.Context, _ pgx.Tx, a compensate.Artifact) error {
				fmt.Println("delete", a.Ref) // idempotent: a missing object is done
				return nil
			},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1}), Generation: 1}
	ref := "videos/v1-g1.mp4" // the generation in the name: refs of its own
	_ = arts.Record(ctx, pool, exec, "object", ref)

	// The job is reclaimed while the upload is on its way; the sweep
	// removes what there is.
	_ = jobs.Guard.Fail(ctx, pool, exec, jobguard.ReclaimedReasonDefault)
	rep, _ := arts.Compensate(ctx)
	fmt.Printf("first sweep: %+v\n", rep)

	// The execution retries its upload, recording first.
	err = arts.Record(ctx, pool, exec, "object", ref)
	fmt.Println("record:", errors.Is(err, compensate.ErrCompensated), jobguard.IsPermanent(err))
	rep, _ = arts.Compensate(ctx) // owed again, in case it uploads anyway
	fmt.Printf("next sweep: %+v\n", rep)
	rep, _ = arts.Compensate(ctx) // the recheck is ten minutes away
	fmt.Printf("a sweep later: %+v\n", rep)
	// Ten minutes on by the database's clock, whatever the sweepers'
	// clocks say, a sweep deletes it once more (Report.Rechecked).
	// Output:
	// delete videos/v1-g1.mp4
	// first sweep: {Kept:0 Rejected:1 Compensated:1 Rechecked:0 Spared:0 Failed:0}
	// record: true true
	// delete videos/v1-g1.mp4
	// next sweep: {Kept:0 Rejected:0 Compensated:1 Rechecked:0 Spared:0 Failed:0}
	// a sweep later: {Kept:0 Rejected:0 Compensated:0 Rechecked:0 Spared:0 Failed:0}
}

// A completion made other than through Finalize keeps the execution's
// artifacts in its own transaction.
func ExampleArtifacts_Keep() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	env.Exec(compensate.Migration)
	ctx, pool := context.Background(), env.Pool

	arts, err := compensate.New(ctx, compensate.Config{
		Guard: jobs.Guard, DB: pool,
		Compensators: map[string]compensate.Func{
			"file": func(context.Context, pgx.Tx, compensate.Artifact) error { return nil },
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1}), Generation: 1}
	_ = arts.Record(ctx, pool, exec, "file", "videos/v1-g1.mp4")

	err = jobs.Guard.CompleteTx(ctx, pool, exec, func(tx pgx.Tx) error {
		return arts.Keep(ctx, tx, exec) // kept if and only if the completion commits
	})
	var state string
	_ = pool.QueryRow(ctx, `SELECT state FROM job_artifacts`).Scan(&state)
	fmt.Println(state, err)
	// Output:
	// kept <nil>
}
