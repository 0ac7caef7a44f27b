package reclaim_test

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/netproxy"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// recorder is a Notifier that keeps what it was given.
type recorder struct {
	mu    sync.Mutex
	execs []jobguard.Execution
}

func (r *recorder) Publish(_ context.Context, execs ...jobguard.Execution) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.execs = append(r.execs, execs...)
	return nil
}

// rescueSetup is the bundled table, the workers table, and a start guard
// per lease given.
type rescueBundle struct {
	jobs *fixture.Jobs
	env  *testenv.Env
}

func rescueSetup(t *testing.T) rescueBundle {
	t.Helper()
	env := testenv.New(t)
	env.Exec(lease.Migration)
	return rescueBundle{jobs: fixture.Create(t, env, fixture.Default), env: env}
}

// startLease takes a lease on the test's pool, stopped at cleanup.
func (b rescueBundle) startLease(t *testing.T, cfg lease.Config) *lease.Lease {
	t.Helper()
	l, err := lease.New(b.env.Pool, cfg)
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	return l
}

// startUnder starts a new QUEUED job under owner (nil: no owner).
func (b rescueBundle) startUnder(t *testing.T, owner jobguard.Owner) jobguard.Execution {
	t.Helper()
	sg, err := jobguard.NewStartGuard(b.jobs.Guard, b.env.Redis, jobguard.StartGuardConfig{Owner: owner})
	require.NoError(t, err)
	id := b.jobs.Insert(t, fixture.Job{Status: b.jobs.Table.Statuses.Queued})
	exec, err := sg.Start(context.Background(), b.env.Pool, id)
	require.NoError(t, err)
	return exec
}

// A job whose owner's lease ended goes back to QUEUED under a new
// generation, with no owner and the rescued reason, whatever its limit;
// its old execution can change nothing, a start guard starts it again,
// and its notice names the generation that lost it. A job under a live
// lease and a job with no owner are left to the limit rule.
func TestSweep_RescuesAJobWhoseOwnerLeaseEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	dead := b.startLease(t, lease.Config{})
	live := b.startLease(t, lease.Config{})
	orphan := b.startUnder(t, dead)
	kept := b.startUnder(t, live)
	unowned := b.startUnder(t, nil)
	require.NoError(t, dead.Stop(ctx))

	notes := &recorder{}
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{}, Notices: notes,
		Limits: reclaim.StaticLimits{"chapter": time.Hour}})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued, logs.String())
	require.Equal(t, []string{orphan.JobID}, rep.RescuedIDs)
	require.Zero(t, rep.Reclaimed)
	require.Contains(t, logs.String(), "rescued=1")
	require.Equal(t, []jobguard.Execution{orphan}, notes.execs, "the notice names the generation that lost the job")

	row := b.jobs.Read(t, orphan.JobID)
	require.Equal(t, b.jobs.Table.Statuses.Queued, row.Status)
	require.Equal(t, orphan.Generation+1, row.Generation)
	require.Equal(t, jobguard.RescuedReasonDefault, row.Reason)
	var owner *string
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT lease_id FROM jobs WHERE id = $1`, orphan.JobID).Scan(&owner))
	require.Nil(t, owner)
	for _, e := range []jobguard.Execution{kept, unowned} {
		require.Equal(t, b.jobs.Table.Statuses.Processing, b.jobs.Read(t, e.JobID).Status)
	}

	// The old execution, should its process come back, is fenced out.
	require.ErrorIs(t, b.jobs.Guard.Touch(ctx, b.env.Pool, orphan), jobguard.ErrJobTerminal)
	require.ErrorIs(t, b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, orphan), jobguard.ErrJobTerminal)
	// The rescued job is not refused: another process starts and
	// completes it.
	other := b.startLease(t, lease.Config{})
	sg, err := jobguard.NewStartGuard(b.jobs.Guard, b.env.Redis, jobguard.StartGuardConfig{Owner: other})
	require.NoError(t, err)
	next, err := sg.Start(ctx, b.env.Pool, orphan.JobID)
	require.NoError(t, err)
	require.Equal(t, orphan.Generation+2, next.Generation)
	require.NoError(t, b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, next))

	again, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, again.Rescued, "nothing is rescued twice")
}

// A live, slow worker is never rescued: its lease renews however long
// its call hangs, and its job is judged by the limit and progress rule
// alone, which reclaims it once over the limit without progress.
func TestSweep_LiveSlowWorkerIsJudgedOnlyByTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	// A TTL with room for renewals on a loaded machine: the test is of
	// the rescue, not of the lease's timing.
	const ttl = 3 * time.Second
	l := b.startLease(t, lease.Config{TTL: ttl})
	exec := b.startUnder(t, l)
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{}, NoProgress: time.Minute,
		Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute}})

	// Several TTLs pass while the call hangs: the lease renews, the job
	// stays.
	for deadline := time.Now().Add(2 * ttl); time.Now().Before(deadline); time.Sleep(ttl / 6) {
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Rescued, logs.String())
		require.Zero(t, rep.Reclaimed)
	}
	require.NoError(t, l.Err())
	require.Equal(t, b.jobs.Table.Statuses.Processing, b.jobs.Read(t, exec.JobID).Status)

	// Over its limit, without progress: the limit rule reclaims it.
	b.jobs.Backdate(t, exec.JobID, b.jobs.Table.StartedAtColumn, time.Hour)
	b.jobs.Backdate(t, exec.JobID, b.jobs.Table.UpdatedAtColumn, time.Hour)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Rescued)
	require.Equal(t, 1, rep.Reclaimed, logs.String())
}

// A shadow sweep and a Plan count and explain a rescue, and write nothing.
func TestPlan_SaysARescueAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	l := b.startLease(t, lease.Config{})
	exec := b.startUnder(t, l)
	require.NoError(t, l.Stop(ctx))
	r, _ := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{}})
	plan, err := r.Plan(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, plan.Report.WouldRescue)
	require.Len(t, plan.Jobs, 1)
	require.Equal(t, reclaim.DecisionRescue, plan.Jobs[0].Decision)
	require.Contains(t, plan.Jobs[0].String(), "rescued: its worker's lease lapsed")
	require.Equal(t, b.jobs.Table.Statuses.Processing, b.jobs.Read(t, exec.JobID).Status)
}

// The rescue needs the owner column and the generation column.
func TestNew_WorkersNeedAnOwnerColumn(t *testing.T) {
	t.Parallel()
	b := rescueSetup(t)
	tb := b.jobs.Table
	tb.OwnerColumn = ""
	g, err := jobguard.New(context.Background(), b.env.Pool, tb)
	require.NoError(t, err)
	_, err = reclaim.New(reclaim.Config{Guard: g, DB: b.env.Pool, Workers: &lease.Workers{}, Limits: reclaim.StaticLimits{}})
	require.ErrorContains(t, err, "Workers")
}

// A worker whose network path to PostgreSQL freezes past its lease is
// rescued like a dead one; thawed, its heartbeat and save are refused by
// the generation, and its lease, lost, starts nothing more.
func TestRescue_FrozenPathWorkerComesBackToRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	const ttl = time.Second
	u, err := url.Parse(b.env.DatabaseURL)
	require.NoError(t, err)
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	path := netproxy.New(t, target)
	u.Host = path.Addr()
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(path.Close)

	l, err := lease.New(pool, lease.Config{TTL: ttl})
	require.NoError(t, err)
	require.NoError(t, l.Start(ctx))
	t.Cleanup(func() { _ = l.Stop(ctx) })
	sg, err := jobguard.NewStartGuard(b.jobs.Guard, b.env.Redis, jobguard.StartGuardConfig{Owner: l})
	require.NoError(t, err)
	id := b.jobs.Insert(t, fixture.Job{Status: b.jobs.Table.Statuses.Queued})
	exec, err := sg.Start(ctx, pool, id)
	require.NoError(t, err)

	path.Freeze()
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{}, Limits: reclaim.StaticLimits{"chapter": time.Hour}})
	waitUntil(t, "the rescue", func() bool {
		rep, err := r.Sweep(ctx)
		require.NoError(t, err, logs.String())
		return rep.Rescued == 1
	})
	<-l.Lost()
	path.Thaw()
	require.ErrorIs(t, b.jobs.Guard.Touch(ctx, pool, exec), jobguard.ErrJobTerminal)
	require.ErrorIs(t, b.jobs.Guard.CompleteIfActive(ctx, pool, exec), jobguard.ErrJobTerminal)
	_, err = sg.Start(ctx, pool, id)
	require.ErrorIs(t, err, jobguard.ErrOwnerLost)
	row := b.jobs.Read(t, id)
	require.Equal(t, b.jobs.Table.Statuses.Queued, row.Status)
	require.Equal(t, exec.Generation+1, row.Generation)
	t.Logf("the frozen worker's lease ended with: %v", l.Err())
}
