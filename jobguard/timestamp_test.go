package jobguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// A guarded write inside a caller's longer transaction stamps updated_at
// (and started_at) with the time of the write, not with the time the
// transaction began: a heartbeat written late in a transaction must not look
// old to the reclaimer.
func TestWrites_StampTheTimeOfTheWriteNotOfTheTransaction(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		pool := jobs.Env.Pool
		g, st := jobs.Guard, jobs.Table.Statuses
		starts, err := jobguard.NewStartGuard(g, jobs.Env.Redis, jobguard.StartGuardConfig{})
		require.NoError(t, err)

		const wait = 200 * time.Millisecond
		// timestamp(3) columns round to the millisecond.
		const precision = time.Millisecond
		// inTx runs write in a transaction that began wait before it and
		// returns, on the database's clock, when the transaction began and a
		// moment right after the write.
		inTx := func(write func(tx pgx.Tx) error) (began, wrote time.Time) {
			t.Helper()
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&began))
			_, err = tx.Exec(ctx, `SELECT pg_sleep($1::float8)`, wait.Seconds())
			require.NoError(t, err)
			require.NoError(t, write(tx))
			require.NoError(t, tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&wrote))
			require.NoError(t, tx.Commit(ctx))
			return began, wrote
		}
		requireStampedAtWrite := func(what string, stamp, began, wrote time.Time) {
			t.Helper()
			require.False(t, stamp.Before(began.Add(wait-precision)),
				"%s: stamped %v, the transaction's start (%v), not the write", what, stamp, began)
			require.False(t, stamp.After(wrote.Add(precision)),
				"%s: stamped %v, after the write (%v)", what, stamp, wrote)
		}

		id := jobs.Insert(t, fixture.Job{Status: st.Queued, UpdatedAgo: time.Hour})
		var exec jobguard.Execution
		began, wrote := inTx(func(tx pgx.Tx) (err error) { exec, err = starts.Start(ctx, tx, id); return err })
		requireStampedAtWrite("Start", jobs.Read(t, id).UpdatedAt, began, wrote)
		if jobs.Table.StartedAtColumn != "" {
			rows, err := jobset.New(g).Snapshot(ctx, pool, []string{id})
			require.NoError(t, err)
			requireStampedAtWrite("Start's started_at", rows[id].StartedAt, began, wrote)
		}
		writes := []struct {
			name  string
			write func(tx pgx.Tx) error
		}{
			{"Touch", func(tx pgx.Tx) error { return g.Touch(ctx, tx, exec) }},
			{"TouchProgress", func(tx pgx.Tx) error { return g.TouchProgress(ctx, tx, exec, 60) }},
			{"CompleteIfActive", func(tx pgx.Tx) error { return g.CompleteIfActive(ctx, tx, exec) }},
		}
		for _, w := range writes {
			began, wrote := inTx(w.write)
			requireStampedAtWrite(w.name, jobs.Read(t, id).UpdatedAt, began, wrote)
		}

		failed := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
		began, wrote = inTx(func(tx pgx.Tx) error {
			return g.Fail(ctx, tx, jobguard.Execution{JobID: failed, Generation: 1}, "bad input")
		})
		requireStampedAtWrite("Fail", jobs.Read(t, failed).UpdatedAt, began, wrote)
		began, wrote = inTx(func(tx pgx.Tx) error { _, err := g.Retry(ctx, tx, failed); return err })
		requireStampedAtWrite("Retry", jobs.Read(t, failed).UpdatedAt, began, wrote)

		stuck := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
		rows, err := jobset.New(g).Snapshot(ctx, pool, []string{stuck})
		require.NoError(t, err)
		began, wrote = inTx(func(tx pgx.Tx) error {
			changed, err := jobset.New(g).FailIfUnchanged(ctx, tx, []jobset.Job{rows[stuck]}, jobguard.ReclaimedReasonDefault)
			require.NoError(t, err)
			require.Len(t, changed.Failed, 1)
			return nil
		})
		requireStampedAtWrite("FailIfUnchanged", jobs.Read(t, stuck).UpdatedAt, began, wrote)
	})
}
