package reclaim_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// A job whose worker failed it and then died: the reclaimer's rescue and
// the operator's Retry of the failed job race on two connections, the
// rescue having read the job as a running orphan before the Fail landed,
// or not. Exactly one of them sends the job back to QUEUED, under exactly
// one new generation: the rescue's write is conditional on the status,
// generation and owner it read, and Retry on FAILED. The old execution is
// fenced out either way. Run for many rounds, so that both orders, and
// the rescue's read falling between the Fail and the Retry, are met.
func TestRescue_RacingAnOperatorsRetryExactlyOneWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{}})
	st := b.jobs.Table.Statuses
	const rounds = 40
	var byRescue, byRetry int
	for round := 0; round < rounds; round++ {
		l := b.startLease(t, lease.Config{})
		exec := b.startUnder(t, l)
		require.NoError(t, l.Stop(ctx)) // the worker dies

		var (
			wg       sync.WaitGroup
			rep      reclaim.Report
			sweepErr error
			failErr  error
			retryErr error
			retried  int64
		)
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			rep, sweepErr = r.Sweep(ctx)
		}()
		go func() {
			defer wg.Done()
			<-start
			// The worker's last word before it died, and the operator's
			// retry of the failed job.
			failErr = b.jobs.Guard.Fail(ctx, b.env.Pool, exec, "encoder crashed")
			retried, retryErr = b.jobs.Guard.Retry(ctx, b.env.Pool, exec.JobID)
		}()
		close(start)
		wg.Wait()
		require.NoError(t, sweepErr, logs.String())

		rescued := len(rep.RescuedIDs) == 1
		row := b.jobs.Read(t, exec.JobID)
		require.Equal(t, st.Queued, row.Status, "round %d", round)
		require.Equal(t, exec.Generation+1, row.Generation, "round %d: one new generation, by one of them", round)
		if rescued {
			byRescue++
			require.Equal(t, []string{exec.JobID}, rep.RescuedIDs)
			require.ErrorIs(t, failErr, jobguard.ErrJobTerminal, "round %d: the rescue won, the Fail is refused", round)
			require.ErrorIs(t, retryErr, jobguard.ErrNotRetryable, "round %d: a rescued job is not failed", round)
			require.Equal(t, jobguard.RescuedReasonDefault, row.Reason)
		} else {
			byRetry++
			require.NoError(t, failErr, "round %d", round)
			require.NoError(t, retryErr, "round %d: the Fail won, the operator retries", round)
			require.Equal(t, exec.Generation+1, retried)
			require.Empty(t, row.Reason)
			require.Zero(t, rep.Rescued)
		}
		// The old execution can change nothing, whoever won.
		require.ErrorIs(t, b.jobs.Guard.Touch(ctx, b.env.Pool, exec), jobguard.ErrJobTerminal)
		require.ErrorIs(t, b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, exec), jobguard.ErrJobTerminal)
	}
	t.Logf("%d rounds: the rescue won %d, the Fail and Retry %d", rounds, byRescue, byRetry)
}
