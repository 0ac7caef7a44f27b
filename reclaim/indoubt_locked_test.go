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
	"github.com/jobguard/jobguard/reclaim"
)

// A reclaim that committed unheard is announced even when the page held a
// row that another transaction keeps locked (a worker's long save): the
// write skipped that row, and reading back what the write did need not
// wait for it.
func TestSweep_ReclaimCommittedUnheardBesideALockedRowIsAnnounced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	held := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 3 * time.Hour})
	free := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	gate := commitgate.New(t, env, "jobs")
	pub := &recorder{}
	r, logs := newReclaimer(t, jobs, reclaim.Config{DB: gate.Pool, Notices: pub})

	worker, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = worker.Rollback(ctx) }()
	_, err = worker.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, held)
	require.NoError(t, err)

	rep, err := sweepThroughGate(t, gate, r, false)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Equal(t, jobs.Table.Statuses.Failed, jobs.Read(t, free).Status, "the server committed the reclaim")
	require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, held).Status)
	require.Equal(t, []string{free}, rep.ReclaimedIDs, logs.String())
	require.Equal(t, []jobguard.Execution{{JobID: free, Generation: 1}}, pub.execs)
	require.True(t, hasMarker(t, jobs, free), "a committed reclaim gets its Redis marker")
}

// The same for a rescue: an orphan whose row a transaction of its dead
// worker still holds (its path froze mid-save) is skipped, and the rescue
// of the others, committed unheard, is announced without waiting for it.
func TestSweep_RescueCommittedUnheardBesideALockedRowIsAnnounced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newUnheardRescue(t, 2)
	first, second := u.orphans[0], u.orphans[1]

	save, err := u.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = save.Rollback(ctx) }()
	_, err = save.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, second.JobID)
	require.NoError(t, err)

	rep, err := sweepThroughGate(t, u.gate, u.r, false)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Equal(t, u.jobs.Table.Statuses.Queued, u.jobs.Read(t, first.JobID).Status, "the server committed the rescue")
	require.Equal(t, []string{first.JobID}, rep.RescuedIDs, u.logs.String())
	require.Equal(t, []jobguard.Execution{first}, u.notes.execs)
}
