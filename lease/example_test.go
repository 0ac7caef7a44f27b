package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
)

func ExampleLease() {
	t, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(t)
	env.Exec(lease.Migration)
	ctx := context.Background()

	l, err := lease.New(env.Pool, lease.Config{TTL: 30 * time.Second, ID: "worker-1"})
	if err != nil {
		panic(err)
	}
	if err := l.Start(ctx); err != nil {
		panic(err)
	}
	dead, _ := lease.Workers{}.Dead(ctx, env.Pool, []string{"worker-1", "worker-0"})
	fmt.Println("dead while held:", dead)

	// A clean shutdown: the lease is dead at once, not TTL later.
	_ = l.Stop(ctx)
	<-l.Lost()
	dead, _ = lease.Workers{}.Dead(ctx, env.Pool, []string{"worker-1", "worker-0"})
	fmt.Println("dead after Stop:", dead, l.Err())
	// Output:
	// dead while held: [worker-0]
	// dead after Stop: [worker-1 worker-0] lease: released
}

func ExampleWorkers_Live() {
	// The predicate goes inside the reclaimer's own conditional write, so
	// that the owner's death is judged in the statement that acts on it.
	live, _ := lease.Workers{}.Live(`j."owner"`)
	fmt.Println(`UPDATE jobs AS j SET status = 'QUEUED' WHERE j.status = 'PROCESSING' AND j."owner" IS NOT NULL AND NOT ` + live)
	// Output:
	// UPDATE jobs AS j SET status = 'QUEUED' WHERE j.status = 'PROCESSING' AND j."owner" IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "jobguard_workers" AS jobguard_lease_w WHERE jobguard_lease_w.id = (j."owner")::text AND jobguard_lease_w.expires_at > now())
}
