package heartbeat_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

func ExampleNew() {
	pool, guard, exec, done := exampleJob()
	defer done()

	// One Heartbeat per process, shared by every job's progress callbacks.
	hb := heartbeat.New(guard, heartbeat.Config{Interval: time.Minute})
	res, err := hb.Beat(context.Background(), pool, exec, heartbeat.Poll("running"))
	fmt.Println(res, err)
	// Output: written <nil>
}

func ExampleHeartbeat_Beat() {
	pool, guard, exec, done := exampleJob()
	defer done()
	ctx := context.Background()
	hb := heartbeat.New(guard, heartbeat.Config{})
	defer hb.Forget(exec.JobID)

	// A progress callback may fire far more often than the heartbeat writes.
	for percent := 10; percent <= 30; percent += 10 {
		res, err := hb.Beat(ctx, pool, exec, heartbeat.Progress(percent))
		if res == heartbeat.Lost {
			fmt.Println("stop:", err)
			return
		}
		fmt.Println(percent, res)
	}
	// Output:
	// 10 written
	// 20 throttled
	// 30 throttled
}

func ExampleHeartbeat_Beat_lost() {
	pool, guard, exec, done := exampleJob()
	defer done()
	ctx := context.Background()
	hb := heartbeat.New(guard, heartbeat.Config{})

	// The reclaimer fails the job while the worker is still encoding.
	_ = guard.Fail(ctx, pool, exec, jobguard.ReclaimedReasonDefault)

	res, err := hb.Beat(ctx, pool, exec, heartbeat.Output(64<<10))
	fmt.Println(res, errors.Is(err, jobguard.ErrJobTerminal), jobguard.IsPermanent(err))
	// Output: lost true true
}

func ExampleHeartbeat_Forget() {
	pool, guard, exec, done := exampleJob()
	defer done()
	ctx := context.Background()
	hb := heartbeat.New(guard, heartbeat.Config{})

	_, _ = hb.Beat(ctx, pool, exec, heartbeat.Progress(100))
	fmt.Println(hb.Len())
	// The execution ended: give the memory back.
	hb.Forget(exec.JobID)
	fmt.Println(hb.Len())
	// Output:
	// 1
	// 0
}

func ExampleEvidence() {
	fmt.Println(heartbeat.Progress(42))
	fmt.Println(heartbeat.Output(4096))
	fmt.Println(heartbeat.Poll("running"))
	fmt.Println(heartbeat.Evidence{})
	// Output:
	// progress 42%
	// output 4096 units
	// poll "running"
	// no evidence
}

// exampleJob gives an example a PROCESSING job at generation 1 in a schema of
// its own, and a func that drops the schema.
func exampleJob() (jobguard.DB, *jobguard.Guard, jobguard.Execution, func()) {
	t, done := testenv.ExampleTB()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	return env.Pool, jobs.Guard, jobguard.Execution{JobID: id, Generation: 1}, done
}
