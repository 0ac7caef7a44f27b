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

// A counter keyed by a domain over varchar(5): an account longer than
// that is refused, through Accrue and through settle alike, never cut to
// another account's key ("alice-2" is not "alice").
func TestCounters_DomainKeyWithALengthNeverCutsAnAccountInSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE DOMAIN acct5 AS varchar(5);
		CREATE TABLE totals (account acct5 PRIMARY KEY, ms bigint NOT NULL DEFAULT 0)`)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "totals", Key: "account", Column: "ms"}}})
	require.NoError(t, err)
	ctx := context.Background()
	total := func(account string) int64 {
		var ms int64 = -1
		_ = b.env.Pool.QueryRow(ctx, `SELECT ms FROM totals WHERE account = $1::text`, account).Scan(&ms)
		return ms
	}

	// Accrue refuses the account the key cannot hold.
	first, _ := b.video(t, 1)
	fin, err := b.jobs.Guard.Finalize(ctx, b.env.Pool, first, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	_, err = ledger.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "alice-2", Meter: "video_ms", Quantity: 1}, nil)
	require.Error(t, err, "Accrue refuses a length the key cannot hold")
	require.Equal(t, int64(-1), total("alice"))

	// settle, through the same ledger, must not bill alice for alice-2.
	s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	exec, spec := b.video(t, 700)
	spec.Usage = []usage.Entry{{Account: "alice-2", Meter: "video_ms", Quantity: 700}}
	res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	assert.Error(t, err, "settle refuses it too")
	assert.False(t, res.Settled)
	assert.Equal(t, int64(-1), total("alice"), "alice-2's usage was added to alice's total")
}

// A bit(8) key takes the account as Accrue's statement takes it, through
// settle too: the conversion is the key column's own, modifier included.
func TestCounters_BitKeyBillsThroughSettleAsThroughAccrue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE TABLE totals (account bit(8) PRIMARY KEY, ms bigint NOT NULL DEFAULT 0)`)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "totals", Key: "account", Column: "ms"}}})
	require.NoError(t, err)
	ctx := context.Background()
	total := func() int64 {
		var ms int64 = -1
		_ = b.env.Pool.QueryRow(ctx, `SELECT ms FROM totals WHERE account = B'10101010'`).Scan(&ms)
		return ms
	}

	first, _ := b.video(t, 1)
	fin, err := b.jobs.Guard.Finalize(ctx, b.env.Pool, first, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	acc, err := ledger.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "10101010", Meter: "video_ms", Quantity: 300}, nil)
	require.NoError(t, err)
	require.True(t, acc.Accrued)
	require.Equal(t, int64(300), total())

	s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	exec, spec := b.video(t, 700)
	spec.Usage = []usage.Entry{{Account: "10101010", Meter: "video_ms", Quantity: 700}}
	res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	assert.NoError(t, err)
	assert.True(t, res.Settled)
	b.settleAll(t, s)
	rec, _ := b.record(t, exec)
	assert.Equal(t, "confirmed", rec.State, "record: %+v", rec)
	assert.Equal(t, int64(1000), total())
}
