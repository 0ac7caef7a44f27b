package settle_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// A key column with a case-insensitive collation of its own has "Alice"
// and "alice" as one row under its unique index: a record that bills the
// account both ways, on two meters counted in one table, adds both to that
// row.
func TestCounters_KeyWithACaseInsensitiveCollationIsOneRowInSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
		CREATE TABLE totals (account text COLLATE ci PRIMARY KEY, ms bigint NOT NULL DEFAULT 0, tokens bigint NOT NULL DEFAULT 0)`)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "totals", Key: "account", Column: "ms"},
		"tokens":   {Table: "totals", Key: "account", Column: "tokens"}}})
	require.NoError(t, err)
	ctx := context.Background()
	s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	exec, spec := b.video(t, 700)
	spec.Usage = []usage.Entry{{Account: "Alice", Meter: "video_ms", Quantity: 700}, {Account: "alice", Meter: "tokens", Quantity: 5}}
	res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	assert.NoError(t, err)
	assert.True(t, res.Settled)
	b.settleAll(t, s)
	rec, _ := b.record(t, exec)
	assert.Equal(t, "confirmed", rec.State, "record: %+v", rec)
	var ms, tokens int64
	_ = b.env.Pool.QueryRow(ctx, `SELECT ms, tokens FROM totals WHERE account = 'ALICE'`).Scan(&ms, &tokens)
	assert.Equal(t, []int64{700, 5}, []int64{ms, tokens})
}
