package usage_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/usage"
)

// BenchmarkAccrue is the guarded billing write: ledger insert and increment
// in one transaction. Compare with BenchmarkAccrueBaseline.
func BenchmarkAccrue(b *testing.B) {
	bd := setup(b)
	ctx := context.Background()
	fin, err := bd.finalize(b, "PROCESSING")
	require.NoError(b, err)
	inc := bd.increment(1)
	meters := make([]string, b.N)
	for i := range meters {
		meters[i] = "m" + strconv.Itoa(i) // a new (job, meter) each time: every call accrues
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		acc, err := usage.Accrue(ctx, bd.env.Pool, fin, usage.Entry{Account: "acct-1", Meter: meters[i], Quantity: 1}, inc)
		if err != nil || !acc.Accrued {
			b.Fatalf("accrue: %v (accrued %v)", err, acc.Accrued)
		}
	}
}

// BenchmarkAccrueBaseline is the bare increment in a transaction, what an
// unguarded biller would run.
func BenchmarkAccrueBaseline(b *testing.B) {
	bd := setup(b)
	ctx := context.Background()
	inc := bd.increment(1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx, err := bd.env.Pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := inc(ctx, tx); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
