package retain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/retain"
	"github.com/jobguard/jobguard/settle"
)

func TestSweep_RemovesOnlyFinishedRowsPastTheirAge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.record(t, "confirmed-old", "confirmed", "31 days")
	b.record(t, "given-up-old", "given_up", "31 days")
	b.record(t, "confirmed-young", "confirmed", "29 days")
	b.record(t, "pending-old", "pending", "400 days")
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at)
		VALUES ('"other"."jobs"', 'other-table', 1, 'confirmed', now() - interval '400 days')`)

	b.artifact(t, "done-old", "a", "done", false, "31 days")
	b.artifact(t, "done-recheck", "b", "done", true, "31 days")
	b.artifact(t, "done-young", "c", "done", false, "29 days")
	b.artifact(t, "pending-old", "d", "pending", false, "400 days")
	b.artifact(t, "rejected-old", "e", "rejected", false, "400 days")
	b.artifact(t, "kept-old", "f", "kept", false, "31 days")
	b.artifact(t, "kept-young", "g", "kept", false, "29 days")
	// A kept artifact spares its thing from another execution's owed
	// compensation: it stays while that one is owed.
	b.artifact(t, "kept-spares", "e", "kept", false, "400 days")

	b.marker(t, "expired-2d", "48 hours")
	b.marker(t, "expired-1h", "1 hour")
	b.marker(t, "live", "-1 day")

	rep, err := b.sweeper(t, retain.Config{}).Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, []int64{2, 2, 1}, []int64{rep.Tables[0].Removed, rep.Tables[1].Removed, rep.Tables[2].Removed})
	require.Equal(t, []string{"job_settlements", "job_artifacts", "job_reclaim_markers"},
		[]string{rep.Tables[0].Table, rep.Tables[1].Table, rep.Tables[2].Table})
	require.Equal(t, 30*24*time.Hour, rep.Tables[0].Age)
	require.Equal(t, []string{"confirmed-young", "other-table", "pending-old"}, b.ids(t, "job_settlements"))
	require.Equal(t, []string{"done-recheck", "done-young", "kept-spares", "kept-young", "pending-old", "rejected-old"},
		b.ids(t, "job_artifacts"))
	require.Equal(t, []string{"expired-1h", "live"}, b.ids(t, "job_reclaim_markers"))
	require.NotNil(t, rep.Tables[0].Oldest)
	require.WithinDuration(t, time.Now().Add(-31*24*time.Hour), *rep.Tables[0].Oldest, time.Hour)

	// Once its sibling is compensated and old, the sibling goes; the kept
	// artifact, which a late Record or rejected Finalize of the sibling's
	// execution would need to spare its thing, goes at the sweep after.
	b.env.Exec(`UPDATE job_artifacts SET state = 'done' WHERE job_id = 'rejected-old'`)
	b.env.Exec(`ALTER TABLE job_artifacts DISABLE TRIGGER changed_at_follows_changes`)
	b.env.Exec(`UPDATE job_artifacts SET changed_at = now() - interval '31 days' WHERE job_id = 'rejected-old'`)
	b.env.Exec(`ALTER TABLE job_artifacts ENABLE TRIGGER changed_at_follows_changes`)
	rep, err = b.sweeper(t, retain.Config{}).Sweep(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.Tables[1].Removed)
	require.Equal(t, []string{"done-recheck", "done-young", "kept-spares", "kept-young", "pending-old"}, b.ids(t, "job_artifacts"))
	rep, err = b.sweeper(t, retain.Config{}).Sweep(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.Tables[1].Removed)
	require.Equal(t, []string{"done-recheck", "done-young", "kept-young", "pending-old"}, b.ids(t, "job_artifacts"))
}

// Age is the database's: the boundary falls on its clock, to the minute
// either side, and an artifact stamped by a process whose clock is two
// months behind is as young as the database says.
func TestSweep_AgeIsJudgedOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.record(t, "a-minute-past", "confirmed", "30 days 1 minute")
	b.record(t, "a-minute-short", "confirmed", "29 days 23 hours 59 minutes")
	b.marker(t, "a-minute-past", "1 day 1 minute")
	b.marker(t, "a-minute-short", "23 hours 59 minutes")
	b.artifact(t, "a-minute-past", "a", "done", false, "30 days 1 minute")
	b.artifact(t, "a-minute-short", "b", "done", false, "29 days 23 hours 59 minutes")
	// A process two months behind writes an artifact and finishes it: its
	// updated_at reads two months old, its changed_at is the database's.
	b.artifact(t, "behind", "c", "pending", false, "0")
	b.env.Exec(`UPDATE job_artifacts SET state = 'done', updated_at = now() - interval '60 days' WHERE job_id = 'behind'`)

	_, err := b.sweeper(t, retain.Config{}).Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"a-minute-short"}, b.ids(t, "job_settlements"))
	require.Equal(t, []string{"a-minute-short"}, b.ids(t, "job_reclaim_markers"))
	require.Equal(t, []string{"a-minute-short", "behind"}, b.ids(t, "job_artifacts"))
}

// A row another transaction holds is skipped, not waited on: the sweep
// finishes at once, and the row goes in a later sweep once it is free.
func TestSweep_SkipsAHeldRowAndFinishes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"a", "b", "held", "c"} {
		b.record(t, id, "confirmed", "40 days")
	}
	ctx := context.Background()
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM job_settlements WHERE job_id = 'held' FOR UPDATE`)
	require.NoError(t, err)

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := b.sweeper(t, retain.Config{Batch: 2}).Sweep(sctx)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 3*time.Second, "the sweep did not wait on the held row")
	require.EqualValues(t, 3, rep.Tables[0].Removed)
	require.Equal(t, []string{"held"}, b.ids(t, "job_settlements"))

	require.NoError(t, tx.Rollback(ctx))
	rep, err = b.sweeper(t, retain.Config{}).Sweep(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.Tables[0].Removed)
	require.Empty(t, b.ids(t, "job_settlements"))
}

// A table lock held by another session (a migration) stops that table's
// pass after LockTimeout, with an error, and the other tables are swept.
func TestSweep_ATableLockStopsOnlyThatTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.record(t, "a", "confirmed", "40 days")
	b.marker(t, "m", "2 days")
	ctx := context.Background()
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `LOCK TABLE job_settlements IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	rep, err := b.sweeper(t, retain.Config{LockTimeout: 100 * time.Millisecond}).Sweep(ctx)
	require.ErrorContains(t, err, "job_settlements")
	require.ErrorContains(t, err, "lock timeout")
	require.Error(t, rep.Tables[0].Err)
	require.EqualValues(t, 1, rep.Tables[2].Removed)
}

func TestSweep_RemovesMoreRowsThanABatchInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at)
		SELECT $1, g::text, 1, 'confirmed', now() - interval '40 days' FROM generate_series(1, 2500) AS g`, b.key)
	rep, err := b.sweeper(t, retain.Config{Batch: 1000}).Sweep(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 2500, rep.Tables[0].Removed)
	require.Equal(t, 3, rep.Tables[0].Batches)
	require.Zero(t, b.count(t, "job_settlements"))
}

// Rounds of records settled and aged, a sweep after each: the table holds
// at most one round's records. Its size (autovacuum's work done by VACUUM
// here) stops growing once the freed pages are reused, but only when no
// other session's snapshot keeps the deleted rows visible: on a database
// that other tests share, one long transaction holds them all, so the
// sizes are logged, and only the rows are held to their bound.
func TestSweep_KeepsTheTableAtASteadySize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 5000
	sw := b.sweeper(t, retain.Config{})
	ctx := context.Background()
	var sizes []int64
	for round := range 6 {
		b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, updates, usage, settled_at)
			SELECT $1, $2 || '-' || g, 1, 'confirmed', '[{"name": "video", "args": {"video_id": "v", "duration_ms": 1}}]',
			'[{"account": "acct", "meter": "video_ms", "quantity": 1}]', now() - interval '31 days'
			FROM generate_series(1, $3::int) AS g`, b.key, fmt.Sprint(round), n)
		b.record(t, "young", "confirmed", "1 day")
		require.Equal(t, n+round+1, b.count(t, "job_settlements"))
		rep, err := sw.Sweep(ctx)
		require.NoError(t, err)
		require.EqualValues(t, n, rep.Tables[0].Removed)
		require.Equal(t, round+1, b.count(t, "job_settlements"), "only the young records stay")
		b.env.Exec(`UPDATE job_settlements SET job_id = job_id || '-' || $1 WHERE job_id = 'young'`, fmt.Sprint(round))
		b.env.Exec(`VACUUM job_settlements`)
		var size int64
		require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('job_settlements')`).Scan(&size))
		t.Logf("round %d: pg_total_relation_size(job_settlements) = %d bytes", round+1, size)
		sizes = append(sizes, size)
	}
	t.Logf("sizes by round: %v", sizes)
}

// The preview counts what a sweep would remove, with its oldest and newest,
// and changes nothing.
func TestPreview_ChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.record(t, "r40", "confirmed", "40 days")
	b.record(t, "r35", "given_up", "35 days")
	b.record(t, "r1", "confirmed", "1 day")
	b.marker(t, "m", "3 days")
	sw := b.sweeper(t, retain.Config{})
	rep, err := sw.Preview(context.Background())
	require.NoError(t, err)
	require.True(t, rep.DryRun)
	require.EqualValues(t, 2, rep.Tables[0].Removed)
	require.WithinDuration(t, time.Now().Add(-40*24*time.Hour), *rep.Tables[0].Oldest, time.Hour)
	require.WithinDuration(t, time.Now().Add(-35*24*time.Hour), *rep.Tables[0].Newest, time.Hour)
	require.Zero(t, rep.Tables[1].Removed)
	require.Nil(t, rep.Tables[1].Oldest)
	require.EqualValues(t, 1, rep.Tables[2].Removed)
	require.Equal(t, 3, b.count(t, "job_settlements"))
	require.Equal(t, 1, b.count(t, "job_reclaim_markers"))
}

// Keep is chosen by name: the table is left alone. A negative age is
// refused, not read as keep.
func TestNew_KeepIsChosenByNameAndANegativeAgeIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.record(t, "old", "confirmed", "400 days")
	sw := b.sweeper(t, retain.Config{Tables: []retain.Table{{Rule: b.settler.Retention(), Keep: true}}})
	rep, err := sw.Sweep(context.Background())
	require.NoError(t, err)
	require.True(t, rep.Tables[0].Keep)
	require.Equal(t, 1, b.count(t, "job_settlements"))

	_, err = retain.New(retain.Config{DB: b.env.Pool, Tables: []retain.Table{{Rule: b.settler.Retention(), Age: -time.Hour}}})
	require.ErrorContains(t, err, "Age -1h0m0s is negative (set Keep to keep every row)")
	_, err = retain.New(retain.Config{DB: b.env.Pool, Tables: []retain.Table{{}}})
	require.ErrorContains(t, err, "Rule is empty")
}

// Workers complete and settle jobs while a sweep removes thousands of old
// records beside them: every completion and finalize goes through, none
// waits on the sweep, and their fresh records stay.
func TestSweep_WorkersGoOnWhileItRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at)
		SELECT $1, 'old-' || g, 1, 'confirmed', now() - interval '40 days' FROM generate_series(1, 20000) AS g`, b.key)
	const jobs = 60
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = b.jobs.Insert(t, fixture.Job{Generation: 1})
	}
	done := make(chan struct{})
	var rep retain.Report
	var sweepErr error
	go func() {
		defer close(done)
		rep, sweepErr = b.sweeper(t, retain.Config{Batch: 200}).Sweep(ctx)
	}()
	var slowest time.Duration
	for i, id := range ids {
		exec := jobguard.Execution{JobID: id, Generation: 1}
		start := time.Now()
		if i%2 == 0 {
			require.NoError(t, b.guard.CompleteTx(ctx, b.env.Pool, exec, func(pgx.Tx) error { return nil }))
		} else {
			res, err := b.settler.Finalize(ctx, b.env.Pool, exec, settle.Spec{})
			require.NoError(t, err)
			require.True(t, res.Settled)
		}
		slowest = max(slowest, time.Since(start))
	}
	<-done
	require.NoError(t, sweepErr)
	t.Logf("slowest completion beside the sweep: %v; the sweep removed %d rows in %d batches, %v",
		slowest, rep.Tables[0].Removed, rep.Tables[0].Batches, rep.Took)
	require.Less(t, slowest, 2*time.Second)
	require.EqualValues(t, 20000, rep.Tables[0].Removed)
	require.Equal(t, jobs/2, b.count(t, "job_settlements"), "the finalizes' records stay")
	for _, id := range ids {
		require.Equal(t, b.jobs.Table.Statuses.Completed, b.jobs.Read(t, id).Status)
	}
}
