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

// Two counters of one table and one key, one naming the table through
// search_path (Schema "", its default) and one with its schema: a record
// billing both meters for one account adds each to the account's one row.
func TestCounters_CountersOfOneTableSpelledWithAndWithoutItsSchemaBillThroughSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE TABLE totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0, tokens bigint NOT NULL DEFAULT 0)`)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "totals", Key: "account", Column: "ms"},
		"tokens":   {Schema: b.env.Schema, Table: "totals", Key: "account", Column: "tokens"}}})
	require.NoError(t, err)
	// Accrue totals each counter.
	first, _ := b.video(t, 1)
	fin, err := b.jobs.Guard.Finalize(context.Background(), b.env.Pool, first, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	for _, m := range []string{"video_ms", "tokens"} {
		acc, err := ledger.Accrue(context.Background(), b.env.Pool, fin, usage.Entry{Account: "other", Meter: m, Quantity: 1}, nil)
		require.NoError(t, err)
		require.True(t, acc.Accrued)
	}
	s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	ctx := context.Background()
	exec, spec := b.video(t, 700)
	spec.Usage = append(spec.Usage, usage.Entry{Account: "acct-1", Meter: "tokens", Quantity: 7})
	res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	assert.NoError(t, err)
	assert.True(t, res.Settled)
	b.settleAll(t, s)
	rec, _ := b.record(t, exec)
	assert.Equal(t, "confirmed", rec.State, "record: %+v", rec)
	var ms, tokens int64 = -1, -1
	_ = b.env.Pool.QueryRow(ctx, `SELECT ms, tokens FROM totals WHERE account = 'acct-1'`).Scan(&ms, &tokens)
	assert.Equal(t, [2]int64{700, 7}, [2]int64{ms, tokens})
}
