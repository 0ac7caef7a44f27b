package settle_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// The attributes of a usage entry reach the ledger as the caller gave them,
// whether the finalize billed at once or the sweep billed after an update
// failed: integers beyond 2^53 (a snowflake request id, the largest int64
// and uint64) are not rounded on their way through the record. usage's own
// Accrue stores json.Marshal of the same map, and the ledger must read the
// same either way.
func TestFinalize_UsageAttributesReachTheLedgerExactly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	attrs := map[string]any{
		"request_id": int64(1234567890123456789),
		"max_int64":  int64(math.MaxInt64),
		"max_uint64": uint64(math.MaxUint64),
		"odd":        int64(1<<53 + 1),
		"ratio":      0.1,
	}
	want, err := json.Marshal(attrs)
	require.NoError(t, err)

	for _, path := range []string{"finalize", "sweep"} {
		exec, spec := b.video(t, 1200)
		spec.Usage[0].Attributes = attrs
		if path == "sweep" {
			b.faults.set("content", 1)
		}
		_, err := b.s.Finalize(ctx, b.env.Pool, exec, spec)
		if path == "sweep" {
			require.ErrorIs(t, err, settle.ErrPending)
			b.settleAll(t, b.s)
		} else {
			require.NoError(t, err)
		}
		b.requireLedgerAttributes(t, exec, string(want), path)
	}
}

func (b *bundle) requireLedgerAttributes(t *testing.T, exec jobguard.Execution, want, path string) {
	t.Helper()
	var same bool
	var got string
	require.NoError(t, b.env.Pool.QueryRow(context.Background(),
		`SELECT attributes = $2::jsonb, attributes::text FROM usage_ledger WHERE job_id = $1`,
		exec.JobID, want).Scan(&same, &got))
	require.True(t, same, "%s: the ledger holds %s, the entry gave %s", path, got, want)
}

// The increment gets the entry's attributes as the caller gave them, on
// either path: marshalled again, they are the caller's JSON exactly.
func TestFinalize_IncrementGetsTheAttributesExactly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	attrs := map[string]any{
		"request_id": int64(1234567890123456789),
		"max_uint64": uint64(math.MaxUint64),
		"nested":     map[string]any{"ids": []any{int64(math.MinInt64), int64(1<<53 + 1)}},
	}
	want, err := json.Marshal(attrs)
	require.NoError(t, err)
	got := make(chan []byte, 1)
	s := b.settler(t, quick(settle.Config{Increments: map[string]settle.Increment{
		"video_ms": func(_ context.Context, _ pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
			b, err := json.Marshal(e.Attributes)
			got <- b
			return err
		},
	}}))
	for _, path := range []string{"finalize", "sweep"} {
		exec, spec := b.video(t, 1)
		spec.Usage[0].Attributes = attrs
		if path == "sweep" {
			b.faults.set("content", 1)
		}
		_, err := s.Finalize(ctx, b.env.Pool, exec, spec)
		if path == "sweep" {
			require.ErrorIs(t, err, settle.ErrPending)
			b.settleAll(t, s)
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, string(want), string(<-got), "%s: the increment got other attributes", path)
	}
}
