package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
)

// BenchmarkRenew is the cost of one renewal (the lease's own conditional
// statement, the TTL as an exact interval) beside a plain UPDATE of the
// same row, and the liveness probe beside a plain primary-key read: the
// overhead reads as a ratio. The workers table holds a thousand leases.
//
//	go test ./lease -run '^$' -bench . -benchtime 2000x
func BenchmarkRenew(b *testing.B) {
	env := testenv.New(b)
	env.Exec(lease.Migration)
	env.Exec(`INSERT INTO jobguard_workers (id, host, pid, expires_at)
		SELECT 'w' || g, 'h', g, now() + interval '1 hour' FROM generate_series(1, 1000) g`)
	env.Exec(`ANALYZE jobguard_workers`)
	ctx := context.Background()
	// A lease that is never started: the benchmark runs its renewals.
	l, err := lease.New(env.Pool, lease.Config{ID: "w500", TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("renew", func(b *testing.B) {
		for b.Loop() {
			if ok, err := l.RenewOnce(ctx); err != nil || !ok {
				b.Fatal(err, ok)
			}
		}
	})
	b.Run("baseline=plain-update", func(b *testing.B) {
		for b.Loop() {
			if _, err := env.Pool.Exec(ctx, `UPDATE jobguard_workers SET renewed_at = now() WHERE id = $1`, "w500"); err != nil {
				b.Fatal(err)
			}
		}
	})

	live, err := lease.Workers{}.Live("$1")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("live", func(b *testing.B) {
		var ok bool
		for b.Loop() {
			if err := env.Pool.QueryRow(ctx, `SELECT `+live, "w500").Scan(&ok); err != nil || !ok {
				b.Fatal(err, ok)
			}
		}
	})
	b.Run("baseline=pk-read", func(b *testing.B) {
		var ok bool
		for b.Loop() {
			if err := env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobguard_workers WHERE id = $1)`, "w500").Scan(&ok); err != nil || !ok {
				b.Fatal(err, ok)
			}
		}
	})
}
