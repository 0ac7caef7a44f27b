package usage_test

import (
	"context"
	"math"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

// Zero and empty entries are entries like any other: a zero quantity, the
// largest one, no attributes in either spelling, no increment, each from a
// finalize with no updates at all. Each is recorded once, read back as it
// was given (attributes absent either way), and its increment runs once.
func TestAccrue_ZeroAndEmptyEntriesAccrueOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ledger, err := usage.NewLedger(usage.Config{})
	require.NoError(t, err)
	paths := map[string]func(fin jobguard.Finalized, e usage.Entry, inc func(context.Context, pgx.Tx) error) (usage.Accrual, error){
		"Accrue": func(fin jobguard.Finalized, e usage.Entry, inc func(context.Context, pgx.Tx) error) (usage.Accrual, error) {
			return usage.Accrue(ctx, b.env.Pool, fin, e, inc)
		},
		"AccrueTx": func(fin jobguard.Finalized, e usage.Entry, inc func(context.Context, pgx.Tx) error) (usage.Accrual, error) {
			tx, err := b.env.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			acc, err := ledger.AccrueTx(ctx, tx, fin, e, inc)
			if err == nil {
				require.NoError(t, tx.Commit(ctx))
			}
			return acc, err
		},
	}
	cases := map[string]struct {
		entry     usage.Entry
		increment bool
	}{
		"quantity zero":             {entry: usage.Entry{Account: "a", Meter: "m"}, increment: true},
		"quantity the largest":      {entry: usage.Entry{Account: "a", Meter: "m", Quantity: math.MaxInt64}, increment: true},
		"attributes nil":            {entry: usage.Entry{Account: "a", Meter: "m", Quantity: 3}, increment: true},
		"attributes an empty map":   {entry: usage.Entry{Account: "a", Meter: "m", Quantity: 3, Attributes: map[string]any{}}, increment: true},
		"no increment":              {entry: usage.Entry{Account: "a", Meter: "m", Quantity: 3}},
		"no increment, no quantity": {entry: usage.Entry{Account: "a", Meter: "m"}},
	}
	for path, accrue := range paths {
		for name, tc := range cases {
			t.Run(path+"/"+name, func(t *testing.T) {
				fin, err := b.finalize(t, "PROCESSING") // no updates at all
				require.NoError(t, err)
				require.True(t, fin.Confirmed())
				var runs int
				var inc func(context.Context, pgx.Tx) error
				if tc.increment {
					inc = func(context.Context, pgx.Tx) error { runs++; return nil }
				}

				acc, err := accrue(fin, tc.entry, inc)
				require.NoError(t, err)
				require.True(t, acc.Accrued)
				if tc.increment {
					require.Equal(t, 1, runs)
				}
				var qty int64
				var attrs *string
				require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT quantity, attributes::text FROM usage_ledger WHERE job_id = $1`,
					fin.Execution().JobID).Scan(&qty, &attrs))
				require.Equal(t, tc.entry.Quantity, qty)
				require.Nil(t, attrs, "no attributes, however spelled, are stored as none")

				// A replay with another quantity bills nothing and reports
				// the entry as recorded.
				again, err := accrue(fin, usage.Entry{Account: "a", Meter: "m", Quantity: 5}, inc)
				require.NoError(t, err)
				require.False(t, again.Accrued)
				require.Equal(t, tc.entry.Quantity, again.Entry.Quantity)
				require.Nil(t, again.Entry.Attributes)
				if tc.increment {
					require.Equal(t, 1, runs, "the increment ran again")
				}
			})
		}
	}
}

// A negative quantity is refused before anything is sent: a ledger row
// cannot take one back, and an increment that subtracts is a refund, which
// is not usage.
func TestAccrue_NegativeQuantityIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	for _, q := range []int64{-1, math.MinInt64} {
		_, err := usage.Accrue(context.Background(), b.env.Pool, fin, usage.Entry{Account: "a", Meter: "m", Quantity: q},
			func(context.Context, pgx.Tx) error { t.Fatal("the increment ran"); return nil })
		require.ErrorContains(t, err, "is negative")
	}
	_, rows := b.billed(t)
	require.Zero(t, rows)
}
