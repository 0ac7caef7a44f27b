package settle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
)

// olderSweep is a sweep of a process built before the claim column, during
// a rolling deploy: it sends the statements that version sends, which count
// attempts alone and leave claim as it is.
type olderSweep struct{ b *bundle }

// claim takes the next due record as that version does and returns its
// execution and the attempt it is on.
func (o olderSweep) claim(t *testing.T, lease time.Duration) (jobguard.Execution, int) {
	t.Helper()
	var exec jobguard.Execution
	var attempt int
	require.NoError(t, o.b.env.Pool.QueryRow(context.Background(), `UPDATE job_settlements
		SET attempts = attempts + 1, next_attempt_at = statement_timestamp() + $1::int8 * interval '1 microsecond',
		    updated_at = statement_timestamp()
		WHERE (job_id, generation) = (SELECT job_id, generation FROM job_settlements
			WHERE state = 'pending' AND next_attempt_at <= statement_timestamp()
			ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING job_id, generation, attempts`, lease.Microseconds()).Scan(&exec.JobID, &exec.Generation, &attempt))
	return exec, attempt
}

// handBack is that version's hand-back of an attempt cut short by a stop.
func (o olderSweep) handBack(t *testing.T, exec jobguard.Execution, attempt int) {
	t.Helper()
	tag, err := o.b.env.Pool.Exec(context.Background(), `UPDATE job_settlements
		SET attempts = attempts - 1, next_attempt_at = statement_timestamp(), updated_at = statement_timestamp()
		WHERE job_id = $1 AND generation = $2 AND state = 'pending' AND attempts = $3`,
		exec.JobID, exec.Generation, attempt)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// During a rolling deploy, a sweep of the current version claims a record
// and outlives its lease; a process of the version before the claim column
// claims the record next and is stopped by the deploy, handing its attempt
// back. The hand-back lowers the count of attempts to the number the first
// attempt claimed, and the claim number was never moved: the first
// attempt's late verdict must still change nothing.
func TestSweep_StaleVerdictLeavesARecordHandedBackByAnOlderProcessAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := quick(settle.Config{MaxAttempts: 1})
	cfg.UpdateTimeout = 50 * time.Millisecond // a short lease: UpdateTimeout + BackoffMin
	a := b.settler(t, cfg)
	exec := b.pendingRecord(t, b.s, 1500)

	// The current version claims the record (claim 1, attempt 1) and hangs
	// past its lease.
	release := make(chan struct{})
	late := b.staleAttempt(t, a, release)
	b.leaseLapsed(t, exec)

	// The older process claims it (attempt 2) and is stopped: it hands the
	// attempt back.
	old := olderSweep{b}
	got, attempt := old.claim(t, time.Minute)
	require.Equal(t, exec, got)
	require.Equal(t, 2, attempt)
	old.handBack(t, exec, attempt)
	b.hooks.enter = nil
	before := b.row(t, exec)

	// The stale attempt's handler returns at last, failed: on its last
	// attempt, its verdict would give the record up.
	close(release)
	require.Equal(t, settle.Report{Taken: 1, Raced: 1}, <-late, "the stale attempt's verdict must change nothing")
	require.Equal(t, before, b.row(t, exec), "the stale attempt changed a record it no longer holds")

	b.settleAll(t, b.s)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 1500, VideoReady: true, Published: true}, b.billed(t, exec))
}
