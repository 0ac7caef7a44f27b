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

// A Ledger counts the meters it was built with: a counter added to the
// caller's map afterwards (the map reused to build a second ledger) is
// counted neither by the first ledger's Accrue nor by settle through it.
func TestCounters_LedgerCountsWhatItWasBuiltWithWhateverTheCallerDoesToTheMap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE TABLE totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0, tokens bigint NOT NULL DEFAULT 0)`)
	counters := map[string]usage.Counter{"video_ms": {Table: "totals", Key: "account", Column: "ms"}}
	ledger, err := usage.NewLedger(usage.Config{Counters: counters})
	require.NoError(t, err)
	// The same map, extended for another ledger.
	counters["tokens"] = usage.Counter{Table: "totals", Key: "account", Column: "tokens"}
	_, err = usage.NewLedger(usage.Config{Table: "usage_ledger", Counters: counters})
	require.NoError(t, err)
	ctx := context.Background()
	tokens := func() int64 {
		var n int64 = -1
		_ = b.env.Pool.QueryRow(ctx, `SELECT tokens FROM totals WHERE account = 'acct-1'`).Scan(&n)
		return n
	}

	// The first ledger's Accrue: tokens has no counter there.
	first, _ := b.video(t, 1)
	fin, err := b.jobs.Guard.Finalize(ctx, b.env.Pool, first, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	acc, err := ledger.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "acct-1", Meter: "tokens", Quantity: 5}, nil)
	require.NoError(t, err)
	require.True(t, acc.Accrued)
	require.Equal(t, int64(-1), tokens(), "Accrue: no total for tokens")

	// settle through the same ledger, no increment for tokens.
	s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	exec, spec := b.video(t, 700)
	spec.Usage = []usage.Entry{{Account: "acct-1", Meter: "tokens", Quantity: 7}}
	_, err = s.Finalize(ctx, b.env.Pool, exec, spec)
	assert.ErrorIs(t, err, settle.ErrUnregistered, "the ledger has no counter for tokens, as its Accrue says")
	assert.Equal(t, int64(-1), tokens(), "settle through the ledger totals what its Accrue does not")
}
