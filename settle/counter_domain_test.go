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

// A counter table whose other column has a default, as the Counter doc
// asks, of a NOT NULL domain type: settle inserts the account's row and
// adds to it, as Accrue does.
func TestCounters_CounterTableWithANotNullDomainColumnBillsThroughSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE DOMAIN plan_name AS text NOT NULL;
		CREATE TABLE totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0, plan plan_name DEFAULT 'free')`)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "totals", Key: "account", Column: "ms"}}})
	require.NoError(t, err)
	ctx := context.Background()
	total := func() int64 {
		var ms int64 = -1
		_ = b.env.Pool.QueryRow(ctx, `SELECT ms FROM totals WHERE account = 'acct-1'`).Scan(&ms)
		return ms
	}

	// The counter is usable: Accrue inserts the account's row and adds to it.
	first, _ := b.video(t, 300)
	fin, err := b.jobs.Guard.Finalize(ctx, b.env.Pool, first, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	acc, err := ledger.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "acct-1", Meter: "video_ms", Quantity: 300}, nil)
	require.NoError(t, err)
	require.True(t, acc.Accrued)
	require.Equal(t, int64(300), total())

	// settle, through the same ledger and no increment, cannot.
	s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	exec, spec := b.video(t, 700)
	res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	assert.NoError(t, err)
	assert.True(t, res.Settled)
	rep, err := s.Sweep(ctx)
	require.NoError(t, err)
	b.settleAll(t, s)
	rec, _ := b.record(t, exec)
	assert.Equal(t, "confirmed", rec.State, "record: %+v, sweep: %+v", rec, rep)
	assert.Equal(t, int64(1000), total())
}
