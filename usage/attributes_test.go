package usage_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/usage"
)

// exactAttributes are numbers that a float64 cannot hold: integers beyond
// 2^53 (a snowflake request id, the largest int64 and uint64, 2^53 + 1),
// beside a fraction and a nested integer.
var exactAttributes = map[string]any{
	"request_id": int64(1234567890123456789),
	"max_int64":  int64(math.MaxInt64),
	"max_uint64": uint64(math.MaxUint64),
	"odd":        int64(1<<53 + 1),
	"ratio":      0.1,
	"nested":     map[string]any{"ids": []any{int64(math.MinInt64), uint64(1<<63 + 1)}},
}

// A replayed accrual reports the earlier entry as the ledger holds it: its
// attributes read back as they were given, not rounded through float64.
func TestAccrue_ADuplicateReportsTheEarlierAttributesExactly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	want, err := json.Marshal(exactAttributes)
	require.NoError(t, err)
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	e := usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: 1, Attributes: exactAttributes}
	acc, err := usage.Accrue(ctx, b.env.Pool, fin, e, nil)
	require.NoError(t, err)
	require.True(t, acc.Accrued)

	again, err := usage.Accrue(ctx, b.env.Pool, fin, e, nil)
	require.NoError(t, err)
	require.False(t, again.Accrued)
	got, err := json.Marshal(again.Entry.Attributes)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "the earlier entry's attributes were rounded")
}
