package settle_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// a ledger counts tokens into a table that is not there yet (the
// migration that creates it has not run). Through the ledger's Accrue, only
// a tokens accrual fails ("A table ... the statement cannot use fails the
// accrual"); video_ms, billed by an increment, accrues. settle puts every
// counter's upsert in the one statement that confirms every record, so a
// record that names only video_ms would fail on the missing table at every
// attempt and be given up: never billed.
func TestCounters_ACounterTableThatIsMissingFailsOnlyItsOwnMeterInSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"tokens": {Table: "token_totals", Key: "account", Column: "tokens"}}})
	require.NoError(t, err)
	ctx := context.Background()

	// Accrue: a meter without a counter is untouched by the missing table.
	first, _ := b.video(t, 1)
	fin, err := b.jobs.Guard.Finalize(ctx, b.env.Pool, first, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	acc, err := ledger.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "acct-1", Meter: "video_ms", Quantity: 1}, nil)
	require.NoError(t, err)
	require.True(t, acc.Accrued)

	// settle, with its increment for video_ms, through the same ledger:
	// New refuses the counter it cannot use, by name, rather than fail
	// every billing; once the table is there, the record bills.
	_, err = settle.New(ctx, quick(settle.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Ledger: ledger,
		Handlers: handlers(b.env.Pool, b.faults, b.hooks), Increments: increments(b.hooks)}))
	require.ErrorContains(t, err, `settle: new: Ledger: Counters["tokens"]: table "token_totals" does not exist`)
	b.env.Exec(`CREATE TABLE token_totals (account text PRIMARY KEY, tokens bigint NOT NULL DEFAULT 0)`)
	s := b.settler(t, quick(settle.Config{Ledger: ledger}))
	exec, spec := b.video(t, 700) // usage: video_ms only
	res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	assert.NoError(t, err)
	assert.True(t, res.Settled)
	rec, _ := b.record(t, exec)
	assert.Equal(t, "confirmed", rec.State, "record: %+v", rec)
	assert.Equal(t, int64(700), b.billed(t, exec).AccountMS)
}
