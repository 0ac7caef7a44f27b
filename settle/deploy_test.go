package settle_test

import (
	"context"
	"sync"
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

// giveUp is that version's verdict on its last attempt, fenced on the
// count of attempts alone. It returns the rows it changed.
func (o olderSweep) giveUp(t *testing.T, exec jobguard.Execution, attempt int) int64 {
	t.Helper()
	tag, err := o.b.env.Pool.Exec(context.Background(), `UPDATE job_settlements
		SET state = 'given_up', last_error = 'stale', updated_at = statement_timestamp()
		WHERE job_id = $1 AND generation = $2 AND state = 'pending' AND attempts = $3`,
		exec.JobID, exec.Generation, attempt)
	require.NoError(t, err)
	return tag.RowsAffected()
}

// The other way round: a process of the version before the claim column
// claims a record and outlives its lease, and a sweep of the current
// version claims it next. The older attempt's late verdict, fenced on the
// count of attempts alone, changes nothing, and the current attempt
// settles the record.
func TestSweep_OlderProcessStaleVerdictLeavesTheCurrentClaimAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := b.pendingRecord(t, b.s, 1700)

	old := olderSweep{b}
	got, attempt := old.claim(t, time.Millisecond)
	require.Equal(t, exec, got)
	require.Equal(t, 1, attempt)
	b.leaseLapsed(t, exec)

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.hooks.enter = func(string) { once.Do(func() { close(entered); <-release }) }
	done := make(chan settle.Report, 1)
	go func() { rep, _ := b.s.Sweep(context.Background()); done <- rep }()
	<-entered
	before := b.row(t, exec)
	require.Zero(t, old.giveUp(t, exec, attempt), "the older attempt's stale verdict gave up the current attempt's record")
	require.Equal(t, before, b.row(t, exec))

	close(release)
	require.Equal(t, 1, (<-done).Settled)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 1700, VideoReady: true, Published: true}, b.billed(t, exec))
}

// Every statement that changes a record's attempts moves its claim one
// on, whichever version sends it and whatever it does to the count; one
// that sets the claim itself moves it once, not twice; one that leaves the
// attempts alone leaves the claim alone. The claim never goes down.
func TestMigration_EveryChangeOfAttemptsMovesTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := b.pendingRecord(t, b.s, 100)
	read := func() (attempts int, claim int64) {
		require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT attempts, claim FROM job_settlements
			WHERE job_id = $1 AND generation = $2`, exec.JobID, exec.Generation).Scan(&attempts, &claim))
		return attempts, claim
	}
	steps := []struct {
		name     string
		set      string
		attempts int
		claim    int64
	}{
		{"an older claim", "attempts = attempts + 1", 1, 1},
		{"an older hand-back", "attempts = attempts - 1", 0, 2},
		{"a current claim", "attempts = attempts + 1, claim = claim + 1", 1, 3},
		{"a current hand-back", "attempts = attempts - 1", 0, 4},
		{"a jump", "attempts = 7", 7, 5},
		{"a Reopen", "attempts = 0, state = 'pending'", 0, 6},
		{"a mark", "pending = array_remove(pending, 'x')", 0, 6},
		{"attempts set as they are", "attempts = attempts", 0, 6},
		{"a verdict", "last_error = 'e', next_attempt_at = statement_timestamp()", 0, 6},
	}
	_, last := read()
	for _, st := range steps {
		_, err := b.env.Pool.Exec(context.Background(), `UPDATE job_settlements SET `+st.set+
			` WHERE job_id = $1 AND generation = $2`, exec.JobID, exec.Generation)
		require.NoError(t, err, st.name)
		attempts, claim := read()
		require.Equal(t, st.attempts, attempts, st.name)
		require.Equal(t, st.claim, claim, st.name)
		require.GreaterOrEqual(t, claim, last, "%s lowered the claim", st.name)
		last = claim
	}
}

// The trigger's function is created beside its table, in the schema the
// migration runs in, so that records tables in several schemas each have
// their own; running every file again leaves one trigger.
func TestMigration_ClaimTriggerLivesBesideItsTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(settle.Migration)
	var triggers int
	var tableSchema, funcSchema string
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT count(*), min(c.relnamespace::regnamespace::text),
		min(p.pronamespace::regnamespace::text)
		FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid
		WHERE t.tgrelid = 'job_settlements'::regclass AND NOT t.tgisinternal`).Scan(&triggers, &tableSchema, &funcSchema))
	require.Equal(t, 1, triggers)
	require.Equal(t, b.env.Schema, tableSchema)
	require.Equal(t, tableSchema, funcSchema)
}
