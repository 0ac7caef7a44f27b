package reclaim_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A rescue that committed unheard counts only the jobs it rescued: an
// orphan of its page that an operator cancelled meanwhile (the rescue
// skipped its row, held by the cancel) is not counted as rescued.
func TestSweep_RescueCommittedUnheardCountsNoJobCancelledMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := newUnheardRescue(t, 2)
	b, gate, r, logs := u.rescueBundle, u.gate, u.r, u.logs
	first, second := u.orphans[0], u.orphans[1]

	// The operator's cancel of the second orphan holds its row through the
	// rescue, and commits while the rescue's COMMIT is unheard. Only the
	// sweep's commit waits at the gate.
	operator, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = operator.Rollback(ctx) }()
	_, err = operator.Exec(ctx, `SET LOCAL session_replication_role = replica`)
	require.NoError(t, err)
	_, err = b.jobs.Guard.Cancel(ctx, operator, second.JobID, "wrong prompt")
	require.NoError(t, err)

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opened := make(chan error, 1)
	go func() {
		opened <- gate.Intercept(func() {
			cancel()
			require.NoError(t, operator.Commit(ctx))
		}, false)
	}()
	rep, err := r.Sweep(sctx)
	require.NoError(t, <-opened)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Equal(t, b.jobs.Table.Statuses.Queued, b.jobs.Read(t, first.JobID).Status, "the server committed the rescue")
	require.Equal(t, b.jobs.Table.Statuses.Failed, b.jobs.Read(t, second.JobID).Status, "the operator cancelled it")
	require.Equal(t, []string{first.JobID}, rep.RescuedIDs, logs.String())
	require.Equal(t, 1, rep.Rescued)
}
