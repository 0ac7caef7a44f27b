package retain_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/retain"
)

// benchRows are the aged records each iteration removes.
const benchRows = 10000

// aged inserts benchRows settled records 40 days old, with the timer
// stopped.
func (b *bundle) aged(tb *testing.B) {
	tb.StopTimer()
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at)
		SELECT $1, g::text, 1, 'confirmed', now() - interval '40 days' FROM generate_series(1, $2::int) AS g`, b.key, benchRows)
	tb.StartTimer()
}

// BenchmarkSweep is the retention sweep over settled records: batches of
// 1000, each a transaction with its lock_timeout, locking with SKIP
// LOCKED, the index finding the rows.
func BenchmarkSweep(tb *testing.B) {
	b := setup(tb)
	sw := b.sweeper(tb, retain.Config{Tables: []retain.Table{{Rule: b.settler.Retention()}}})
	ctx := context.Background()
	for tb.Loop() {
		b.aged(tb)
		rep, err := sw.Sweep(ctx)
		require.NoError(tb, err)
		require.EqualValues(tb, benchRows, rep.Tables[0].Removed)
	}
	tb.ReportMetric(float64(benchRows*tb.N)/tb.Elapsed().Seconds(), "rows/s")
}

// BenchmarkPlainDelete is the floor beside BenchmarkSweep: the same rows
// removed by a plain batched DELETE of 1000 on the same index, outside any
// transaction of its own, locking nothing ahead.
func BenchmarkPlainDelete(tb *testing.B) {
	b := setup(tb)
	ctx := context.Background()
	for tb.Loop() {
		b.aged(tb)
		for {
			tag, err := b.env.Pool.Exec(ctx, `DELETE FROM job_settlements WHERE ctid = ANY (ARRAY(
				SELECT ctid FROM job_settlements WHERE jobs_table = $1 AND state IN ('confirmed', 'given_up')
				AND settled_at < now() - interval '30 days' LIMIT 1000))`, b.key)
			require.NoError(tb, err)
			if tag.RowsAffected() < 1000 {
				break
			}
		}
	}
	tb.ReportMetric(float64(benchRows*tb.N)/tb.Elapsed().Seconds(), "rows/s")
}
