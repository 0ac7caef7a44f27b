package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/commitgate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// sweepThroughGate sweeps r, whose DB must be gate.Pool, under a context
// that ends while the sweep's COMMIT waits at the gate; the server then
// commits (or, with refuse, fails the commit) unheard.
func sweepThroughGate(t *testing.T, gate *commitgate.Gate, r *reclaim.Reclaimer, refuse bool) (reclaim.Report, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := make(chan error, 1)
	go func() { opened <- gate.Intercept(cancel, refuse) }()
	rep, err := r.Sweep(ctx)
	require.NoError(t, <-opened)
	return rep, err
}

// unheardRescue is a rescue's stage: n orphans of a worker whose lease
// has ended, and a rescuing reclaimer whose COMMIT goes through a gate
// (sweepThroughGate), with its notices recorded.
type unheardRescue struct {
	rescueBundle
	orphans []jobguard.Execution
	gate    *commitgate.Gate
	notes   *recorder
	r       *reclaim.Reclaimer
	logs    *testenv.Logs
}

func newUnheardRescue(t *testing.T, n int) unheardRescue {
	t.Helper()
	u := unheardRescue{rescueBundle: rescueSetup(t), notes: &recorder{}}
	dead := u.startLease(t, lease.Config{})
	for range n {
		u.orphans = append(u.orphans, u.startUnder(t, dead))
	}
	require.NoError(t, dead.Stop(context.Background()))
	u.gate = commitgate.New(t, u.env, "jobs")
	u.r, u.logs = newReclaimer(t, u.jobs, reclaim.Config{DB: u.gate.Pool, Workers: &lease.Workers{}, Notices: u.notes,
		Limits: reclaim.StaticLimits{"chapter": time.Hour}})
	return u
}

// A reclaim whose COMMIT reached the server while the sweep's context
// ended, so that the sweep never heard it commit, is announced all the
// same: the sweep reads the rows back once that transaction has ended, and
// writes the markers and publishes the notices of what committed, and
// counts it.
func TestSweep_ReclaimCommittedUnheardIsAnnounced(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour})
	gate := commitgate.New(t, env, "jobs")
	pub := &recorder{}
	r, logs := newReclaimer(t, jobs, reclaim.Config{DB: gate.Pool, Notices: pub})

	rep, err := sweepThroughGate(t, gate, r, false)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Eventually(t, func() bool { return jobs.Read(t, id).Status == jobs.Table.Statuses.Failed },
		30*time.Second, 10*time.Millisecond, "the server commits the reclaim")
	require.Equal(t, []string{id}, rep.ReclaimedIDs, logs.String())
	require.Equal(t, []jobguard.Execution{{JobID: id, Generation: 3}}, pub.execs)
	require.True(t, hasMarker(t, jobs, id), "a committed reclaim gets its Redis marker")
}

// The same with the markers in Postgres: the reclaim and its markers
// commit in one transaction, whose COMMIT the sweep never hears.
func TestSweep_ReclaimCommittedUnheardInATransactionIsAnnounced(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	guard := jobs.NoRedis(t)
	id := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour})
	gate := commitgate.New(t, env, "jobs")
	pub := &recorder{}
	r, err := reclaim.New(reclaim.Config{Guard: guard, DB: gate.Pool, Notices: pub,
		Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute}})
	require.NoError(t, err)

	rep, err := sweepThroughGate(t, gate, r, false)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Equal(t, []string{id}, rep.ReclaimedIDs)
	require.Equal(t, []jobguard.Execution{{JobID: id, Generation: 3}}, pub.execs)
	store, err := marker.NewPostgresStore(guard, marker.Config{})
	require.NoError(t, err)
	_, found, err := store.Read(context.Background(), env.Pool, id)
	require.NoError(t, err)
	require.True(t, found, "the marker committed with the reclaim")
}

// A rescue whose write committed unheard is announced the same way: the
// notice names the generation that lost the job.
func TestSweep_RescueCommittedUnheardIsAnnounced(t *testing.T) {
	t.Parallel()
	u := newUnheardRescue(t, 1)
	orphan := u.orphans[0]

	rep, err := sweepThroughGate(t, u.gate, u.r, false)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Eventually(t, func() bool { return u.jobs.Read(t, orphan.JobID).Status == u.jobs.Table.Statuses.Queued },
		30*time.Second, 10*time.Millisecond, "the server commits the rescue")
	require.Equal(t, []string{orphan.JobID}, rep.RescuedIDs, u.logs.String())
	require.Equal(t, []jobguard.Execution{orphan}, u.notes.execs)
}

// A reclaim whose COMMIT the sweep gave up on, and that then failed, is
// not announced: the rows read back are as they were.
func TestSweep_ReclaimRolledBackUnheardIsNotAnnounced(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour})
	gate := commitgate.New(t, env, "jobs")
	pub := &recorder{}
	r, _ := newReclaimer(t, jobs, reclaim.Config{DB: gate.Pool, Notices: pub})

	rep, err := sweepThroughGate(t, gate, r, true)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Empty(t, rep.ReclaimedIDs)
	require.Empty(t, pub.execs)
	require.False(t, hasMarker(t, jobs, id))
	require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status, "the commit failed")
}
