package compensate_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/fixture"
	"github.com/jobguard/jobguard/internal/testenv"
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
	// {Kept:0 Rejected:0 Compensated:0 Failed:0} <nil>
}
