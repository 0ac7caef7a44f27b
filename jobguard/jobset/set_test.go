package jobset_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// batchBumpGeneration moves a job to a newer generation without touching
// anything else, the way another start path would fence out an old reader.
func batchBumpGeneration(t *testing.T, jobs *fixture.Jobs, id string) {
	t.Helper()
	tb := jobs.Table
	jobs.Env.Exec(fmt.Sprintf("UPDATE %s SET %s = %s + 1 WHERE %s::text = $1", tb.QualifiedName(),
		ident.Quote(tb.GenerationColumn), ident.Quote(tb.GenerationColumn), ident.Quote(tb.IDColumn)), id)
}

func TestSnapshot_ReadsRowsKeyedByGivenID(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		a := jobs.Insert(t, fixture.Job{Generation: 4, ParentID: "7", UpdatedAgo: time.Hour})
		b := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})

		got, err := jobset.New(jobs.Guard).Snapshot(ctx, jobs.Env.Pool, []string{a, b, a, "not-a-row", ""})
		require.NoError(t, err)
		require.Len(t, got, 2)
		sa := got[a]
		require.Equal(t, a, sa.ID)
		require.Equal(t, jobs.Table.Statuses.Processing, sa.Status)
		require.Equal(t, jobs.Read(t, a).UpdatedAt, sa.UpdatedAt)
		require.WithinDuration(t, time.Now().Add(-time.Hour), sa.UpdatedAt, time.Minute)
		if jobs.Guard.Fenced() {
			require.EqualValues(t, 4, sa.Generation)
		}
		if jobs.Table.TypeColumn != "" {
			require.Equal(t, "chapter", sa.Type)
		}
		if jobs.Table.ParentIDColumn != "" {
			require.Equal(t, "7", sa.ParentID)
		}
		if jobs.Table.StartedAtColumn != "" {
			require.WithinDuration(t, time.Now().Add(-time.Hour), sa.StartedAt, time.Minute)
		} else {
			require.True(t, sa.StartedAt.IsZero())
		}
		require.Equal(t, jobs.Table.Statuses.Queued, got[b].Status)
	})
}

func TestSnapshot_AcceptsUUIDInAnyCase(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{})
	u := uuid.MustParse(id)
	upper := fmt.Sprintf("%X", u[:]) // no dashes, upper case

	got, err := jobset.New(jobs.Guard).Snapshot(context.Background(), env.Pool, []string{upper})
	require.NoError(t, err)
	require.Equal(t, id, got[upper].ID)
}

func TestFailIfUnchanged_FailsOnlyRowsStillAsRead(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		st := jobs.Table.Statuses
		stalled := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		progressed := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		completed := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		restarted := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})

		snap, err := jobset.New(jobs.Guard).Snapshot(ctx, db, []string{stalled, progressed, completed, restarted})
		require.NoError(t, err)
		// Between the read and the write: progress, a completion, a new start.
		require.NoError(t, jobs.Guard.Touch(ctx, db, jobguard.Execution{JobID: progressed, Generation: 2}))
		require.NoError(t, jobs.Guard.CompleteIfActive(ctx, db, jobguard.Execution{JobID: completed, Generation: 2}))
		if jobs.Guard.Fenced() {
			batchBumpGeneration(t, jobs, restarted)
		}

		expected := []jobset.Job{snap[stalled], snap[progressed], snap[completed], snap[restarted]}
		res, err := jobset.New(jobs.Guard).FailIfUnchanged(ctx, db, expected, "stuck")
		require.NoError(t, err)

		ids := []string{}
		for _, c := range res.Failed {
			ids = append(ids, c.ID)
			require.Equal(t, st.Failed, c.Status)
			if jobs.Guard.Fenced() {
				require.EqualValues(t, 2, c.Generation, "the generation that lost the job")
			}
		}
		want := []string{stalled}
		moved := []string{progressed, completed, restarted}
		if !jobs.Guard.Fenced() {
			want = append(want, restarted) // status-only mode cannot see a restart
			moved = moved[:2]
		}
		require.ElementsMatch(t, want, ids)
		require.Equal(t, len(moved), res.Moved)
		require.Zero(t, res.Locked)

		require.Equal(t, st.Failed, jobs.Read(t, stalled).Status)
		require.Equal(t, "stuck", jobs.Read(t, stalled).Reason)
		require.Equal(t, st.Processing, jobs.Read(t, progressed).Status)
		require.Equal(t, st.Completed, jobs.Read(t, completed).Status)
		if jobs.Guard.Fenced() {
			require.Equal(t, st.Processing, jobs.Read(t, restarted).Status)
		}
	})
}

// The failed rows are reported as the write left them: a parent changed
// after the read, which the write does not compare, is the row's new one.
func TestFailIfUnchanged_ReportsTheParentAsWritten(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		if jobs.Table.ParentIDColumn == "" {
			t.Skip("no parent column")
		}
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{UpdatedAgo: time.Hour, ParentID: "course-1"})
		kept := jobs.Insert(t, fixture.Job{UpdatedAgo: time.Hour, ParentID: "course-3"})
		snap, err := jobset.New(jobs.Guard).Snapshot(ctx, jobs.Env.Pool, []string{id, kept})
		require.NoError(t, err)
		require.Equal(t, "course-1", snap[id].ParentID)
		jobs.Env.Exec(fmt.Sprintf(`UPDATE %s SET %s = 'course-2' WHERE %s::text = $1`, jobs.Table.QualifiedName(),
			ident.Quote(jobs.Table.ParentIDColumn), ident.Quote(jobs.Table.IDColumn)), id)

		res, err := jobset.New(jobs.Guard).FailIfUnchanged(ctx, jobs.Env.Pool, []jobset.Job{snap[id], snap[kept]}, "stuck")
		require.NoError(t, err)
		parents := map[string]string{}
		for _, f := range res.Failed {
			parents[f.ID] = f.ParentID
		}
		require.Equal(t, map[string]string{id: "course-2", kept: "course-3"}, parents)
	})
}

func TestFailIfUnchanged_SecondWriteChangesNothing(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{UpdatedAgo: time.Hour})
		snap, err := jobset.New(jobs.Guard).Snapshot(ctx, jobs.Env.Pool, []string{id})
		require.NoError(t, err)

		first, err := jobset.New(jobs.Guard).FailIfUnchanged(ctx, jobs.Env.Pool, []jobset.Job{snap[id]}, "stuck")
		require.NoError(t, err)
		require.Len(t, first.Failed, 1)
		require.True(t, jobs.Read(t, id).UpdatedAt.After(snap[id].UpdatedAt), "the write moves updated_at")
		second, err := jobset.New(jobs.Guard).FailIfUnchanged(ctx, jobs.Env.Pool, []jobset.Job{snap[id]}, "stuck")
		require.NoError(t, err)
		require.Empty(t, second.Failed)
		require.Equal(t, 1, second.Moved)
	})
}

func TestFailIfUnchanged_InvalidIDSendsNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{UpdatedAgo: time.Hour})
	snap, err := jobset.New(jobs.Guard).Snapshot(context.Background(), env.Pool, []string{id})
	require.NoError(t, err)

	_, err = jobset.New(jobs.Guard).FailIfUnchanged(context.Background(), env.Pool,
		[]jobset.Job{snap[id], {ID: "nope"}}, "stuck")
	require.ErrorIs(t, err, jobguard.ErrInvalidJobID)
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
}

// A reclaim by hand: read the rows, decide, and fail in one statement only
// those still exactly as read.
func ExampleSet_FailIfUnchanged() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
	if err != nil {
		log.Fatal(err)
	}
	set := jobset.New(guard)
	rows, err := set.Snapshot(ctx, pool, []string{"7c9e6679-7425-40de-944b-e07fc1f90ae7"})
	if err != nil {
		log.Fatal(err)
	}
	var stalled []jobset.Job
	for _, r := range rows {
		if r.ReadAt.Sub(r.UpdatedAt) > time.Hour { // on the database's clock
			stalled = append(stalled, r)
		}
	}
	res, err := set.FailIfUnchanged(ctx, pool, stalled, jobguard.ReclaimedReasonDefault)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("failed %d of %d; %d moved meanwhile, %d held by a writer", len(res.Failed), len(stalled), res.Moved, res.Locked)
}

func TestFailIfUnchanged_SkipsARowAnotherTransactionHolds(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		held := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
		free := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
		snap, err := jobset.New(jobs.Guard).Snapshot(ctx, db, []string{held, free})
		require.NoError(t, err)

		// A worker's transaction holds the row and sits idle.
		worker, err := db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = worker.Rollback(ctx) }()
		_, err = worker.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s WHERE %s::text = $1 FOR UPDATE",
			jobs.Table.QualifiedName(), ident.Quote(jobs.Table.IDColumn)), held)
		require.NoError(t, err)

		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := jobset.New(jobs.Guard).FailIfUnchanged(wctx, db, []jobset.Job{snap[held], snap[free]}, "stuck")
		require.NoError(t, err, "the write does not wait for the held row")
		require.Equal(t, 1, res.Locked)
		require.Len(t, res.Failed, 1)
		require.Equal(t, free, res.Failed[0].ID)
		require.Zero(t, res.Moved)
		require.NoError(t, worker.Rollback(ctx))
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, held).Status)
		require.Equal(t, jobs.Table.Statuses.Failed, jobs.Read(t, free).Status)
	})
}

func TestOverdue_ReadsOnlyJobsOverTheirTypesLimit(t *testing.T) {
	t.Parallel()
	for _, v := range []fixture.Variant{fixture.Default, fixture.Prisma} {
		for _, simple := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/simple=%v", v.Name, simple), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				env := testenv.New(t, testenv.Config{SimpleProtocol: simple})
				jobs := fixture.Create(t, env, v)
				st := jobs.Table.Statuses
				over := jobs.Insert(t, fixture.Job{Generation: 3, ParentID: "p", UpdatedAgo: 2 * time.Hour})
				jobs.Insert(t, fixture.Job{UpdatedAgo: 10 * time.Minute})                          // within its limit
				jobs.Insert(t, fixture.Job{Type: "video", UpdatedAgo: 2 * time.Hour})              // video's limit is 3h
				mystery := jobs.Insert(t, fixture.Job{Type: "mystery", UpdatedAgo: 2 * time.Hour}) // no limit: Otherwise
				jobs.Insert(t, fixture.Job{Status: st.Queued, UpdatedAgo: 2 * time.Hour})
				jobs.Insert(t, fixture.Job{Status: st.Completed, UpdatedAgo: 2 * time.Hour})
				noStart := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
				env.Exec(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s = $1", jobs.Table.QualifiedName(),
					ident.Quote(jobs.Table.StartedAtColumn), ident.Quote(jobs.Table.IDColumn)), noStart)

				got, err := jobset.New(jobs.Guard).Overdue(ctx, env.Pool, jobset.OverdueQuery{
					Limits: map[string]time.Duration{"chapter": 30 * time.Minute, "video": 3 * time.Hour, "mystery": time.Hour},
					Max:    100,
				})
				require.NoError(t, err)
				var ids []string
				for _, s := range got {
					ids = append(ids, s.ID)
				}
				require.ElementsMatch(t, []string{over, mystery}, ids)
				for _, s := range got {
					require.Equal(t, st.Processing, s.Status)
					require.WithinDuration(t, time.Now(), s.ReadAt, time.Minute, "ReadAt is the database's clock")
					require.InDelta(t, (2 * time.Hour).Seconds(), s.ReadAt.Sub(s.StartedAt).Seconds(), 60)
					require.InDelta(t, (2 * time.Hour).Seconds(), s.ReadAt.Sub(s.UpdatedAt).Seconds(), 60)
					if s.ID == over {
						require.Equal(t, "chapter", s.Type)
						require.Equal(t, "p", s.ParentID)
						require.EqualValues(t, 3, s.Generation)
					}
				}

				none, err := jobset.New(jobs.Guard).Overdue(ctx, env.Pool, jobset.OverdueQuery{
					Limits: map[string]time.Duration{"chapter": 30 * time.Minute, "video": 3 * time.Hour},
					Max:    100,
				})
				require.NoError(t, err)
				require.Len(t, none, 1, "a type with no limit is left out")

				types, err := jobset.New(jobs.Guard).ActiveTypes(ctx, env.Pool)
				require.NoError(t, err)
				require.ElementsMatch(t, []string{"chapter", "video", "mystery"}, types, "the types of QUEUED and PROCESSING jobs")
			})
		}
	}
}

func TestOverdue_PagesThroughEveryJobOnce(t *testing.T) {
	t.Parallel()
	for _, v := range []fixture.Variant{fixture.Default, fixture.Prisma} {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, v)
			var want []string
			for range 25 {
				want = append(want, jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour}))
			}
			q := jobset.OverdueQuery{Limits: map[string]time.Duration{"chapter": time.Hour}, Max: 10}
			var got []string
			pages := 0
			for {
				page, err := jobset.New(jobs.Guard).Overdue(ctx, env.Pool, q)
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				pages++
				require.LessOrEqual(t, len(page), 10)
				for _, s := range page {
					got = append(got, s.ID)
				}
				q.After = page[len(page)-1].ID
			}
			require.Equal(t, 3, pages)
			require.ElementsMatch(t, want, got)
		})
	}
}

func TestOverdue_NeedsAStartedAtColumn(t *testing.T) {
	t.Parallel()
	jobs := fixture.Create(t, testenv.New(t), fixture.IntID)
	_, err := jobset.New(jobs.Guard).Overdue(context.Background(), jobs.Env.Pool, jobset.OverdueQuery{Max: 1})
	require.ErrorIs(t, err, jobset.ErrNoStartedAt)
}

// A type column that is a Postgres enum: the types come back as text, and a
// limit naming a label the enum lacks selects nothing rather than failing
// the cast.
func TestOverdue_EnumTypeColumn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(`CREATE TYPE "JobKind" AS ENUM ('chapter', 'video')`)
	env.Exec(`CREATE TABLE kinds_jobs (
		id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
		kind "JobKind" NOT NULL,
		status text NOT NULL,
		generation int NOT NULL DEFAULT 0,
		failure_reason text,
		started_at timestamptz,
		updated_at timestamptz NOT NULL DEFAULT now())`)
	env.Exec(`CREATE INDEX ON kinds_jobs (kind, started_at) WHERE status IN ('QUEUED', 'PROCESSING')`)
	env.Exec(`INSERT INTO kinds_jobs (kind, status, started_at) VALUES
		('chapter', 'PROCESSING', now() - interval '2 hours'),
		('video', 'PROCESSING', now() - interval '2 hours'),
		('video', 'PROCESSING', now() - interval '5 minutes')`)
	g, err := jobguard.New(ctx, env.Pool, jobguard.Table{Schema: env.Schema, Name: "kinds_jobs",
		TypeColumn: "kind", GenerationColumn: "generation", StartedAtColumn: "started_at"})
	require.NoError(t, err)

	types, err := jobset.New(g).ActiveTypes(ctx, env.Pool)
	require.NoError(t, err)
	require.Equal(t, []string{"chapter", "video"}, types, "in the enum's order")
	got, err := jobset.New(g).Overdue(ctx, env.Pool, jobset.OverdueQuery{
		Limits: map[string]time.Duration{"video": time.Hour, "no-such-label": time.Minute},
		Max:    10,
	})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "video", got[0].Type)
}

// Inside a caller's transaction, a row is read on the clock of the
// statement that reads it, the clock the guarded writes stamp: a job
// touched a moment ago in that transaction has stood still for a moment,
// never for a negative time, and is not overdue by the transaction's age.
func TestSnapshot_InsideACallersTransactionReadsOnTheStatementsClock(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
		tx, err := jobs.Env.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT pg_sleep(0.3)`) // the transaction ages
		require.NoError(t, err)
		require.NoError(t, jobs.Guard.Touch(ctx, tx, jobguard.Execution{JobID: id, Generation: 1}))

		got, err := jobset.New(jobs.Guard).Snapshot(ctx, tx, []string{id})
		require.NoError(t, err)
		row := got[id]
		require.False(t, row.ReadAt.Before(row.UpdatedAt),
			"read at %v, before the touch it reads (%v)", row.ReadAt, row.UpdatedAt)
	})
}

// An After that is no id of the table is refused before the statement is
// sent: a failed cast on the server would abort the caller's transaction.
func TestOverdue_BadAfterLeavesACallersTransactionUsable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs := fixture.Create(t, testenv.New(t), fixture.Default)
	tx, err := jobs.Env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = jobset.New(jobs.Guard).Overdue(ctx, tx, jobset.OverdueQuery{
		Limits: map[string]time.Duration{"chapter": time.Minute}, Max: 10, After: "not-a-uuid"})
	require.ErrorIs(t, err, jobguard.ErrInvalidJobID)
	_, err = jobset.New(jobs.Guard).Snapshot(ctx, tx, []string{uuid.NewString()})
	require.NoError(t, err, "the transaction is still usable")
}

// Settled waits for the transaction that holds a row to end and reads the
// row as it committed, where Snapshot reads it as it was; a transaction
// that outlasts the context's deadline fails the read instead of hanging
// it.
func TestSettled_ReadsARowAsItsHoldingTransactionCommitsIt(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
		set := jobset.New(jobs.Guard)
		snap, err := set.Snapshot(ctx, db, []string{id})
		require.NoError(t, err)

		writer, err := db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = writer.Rollback(ctx) }()
		res, err := set.FailIfUnchanged(ctx, writer, []jobset.Job{snap[id]}, "stuck")
		require.NoError(t, err)
		require.Len(t, res.Failed, 1)

		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		got, err := set.Settled(short, db, []string{id})
		require.ErrorIs(t, err, jobset.ErrHeld, "the writer holds the row past the deadline")
		require.Empty(t, got, "a held row is not read as it was before the writer")

		// Whether Settled first finds the row held (and reads again) or
		// reads it after the commit, it reads what the writer committed,
		// never the version before it.
		read := make(chan map[string]jobset.Job, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			got, err := set.Settled(wctx, db, []string{id})
			if err != nil {
				t.Error(err)
			}
			read <- got
		}()
		time.Sleep(50 * time.Millisecond) // most often, Settled finds the row held first
		require.NoError(t, writer.Commit(ctx))
		got = <-read
		require.Equal(t, jobs.Table.Statuses.Failed, got[id].Status)
		require.Equal(t, "stuck", got[id].FailureReason)
	})
}

// BeginFailIfUnchanged leaves its write in an open transaction: rolled
// back, nothing changed; committed, the job is failed.
func TestBeginFailIfUnchanged_WriteIsTheTransactionsFirstStatement(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{UpdatedAgo: time.Hour})
		snap, err := jobset.New(jobs.Guard).Snapshot(ctx, jobs.Env.Pool, []string{id})
		require.NoError(t, err)
		set := jobset.New(jobs.Guard)

		tx, res, err := set.BeginFailIfUnchanged(ctx, jobs.Env.Pool, []jobset.Job{snap[id]}, "stuck")
		require.NoError(t, err)
		require.Len(t, res.Failed, 1)
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status, "not committed yet")
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status, "rolled back")

		tx, res, err = set.BeginFailIfUnchanged(ctx, jobs.Env.Pool, []jobset.Job{snap[id]}, "stuck")
		require.NoError(t, err)
		require.Len(t, res.Failed, 1)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, jobs.Table.Statuses.Failed, jobs.Read(t, id).Status)

		_, _, err = set.BeginFailIfUnchanged(ctx, jobs.Env.Pool, []jobset.Job{{ID: "not an id of any kind \x00"}}, "stuck")
		require.Error(t, err)
		require.Zero(t, jobs.Env.Pool.Stat().AcquiredConns(), "nothing is left open")
	})
}
