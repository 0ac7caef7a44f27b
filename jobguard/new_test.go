package jobguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

func TestNew_RejectsBadMappingWithNamedProblem(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(jobguard.Migration)
	env.Exec(`CREATE TYPE short_status AS ENUM ('QUEUED', 'PROCESSING', 'DONE', 'FAILED')`)
	env.Exec(`CREATE TABLE enum_jobs (id uuid PRIMARY KEY, status short_status NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now(), failure_reason text, generation text)`)
	ctx := context.Background()
	def := jobguard.DefaultTable()
	with := func(f func(*jobguard.Table)) jobguard.Table { t := def; f(&t); return t }

	cases := map[string]struct {
		table jobguard.Table
		want  string
	}{
		"missing table":     {with(func(t *jobguard.Table) { t.Name = "jobz" }), `table "jobz" does not exist`},
		"missing schema":    {with(func(t *jobguard.Table) { t.Schema = "nope" }), `"nope"."jobs" does not exist in schema "nope"`},
		"missing column":    {with(func(t *jobguard.Table) { t.UpdatedAtColumn = "updatedAt" }), `has no column "updatedAt" (UpdatedAtColumn)`},
		"wrong type":        {with(func(t *jobguard.Table) { t.GenerationColumn = "payload" }), `column "payload" (GenerationColumn) of "jobs" is jsonb; want an integer`},
		"enum lacks labels": {jobguard.Table{Name: "enum_jobs"}, `enum short_status has no label ["COMPLETED"]`},
		"bad generation":    {jobguard.Table{Name: "enum_jobs", GenerationColumn: "generation", Statuses: jobguard.Statuses{Completed: "DONE"}}, `(GenerationColumn) of "enum_jobs" is text`},
		"same column twice": {with(func(t *jobguard.Table) { t.StartedAtColumn = "updated_at" }), `UpdatedAtColumn and StartedAtColumn both name column "updated_at"`},
		"duplicate status":  {with(func(t *jobguard.Table) { t.Statuses.Failed = "QUEUED" }), `Statuses has "QUEUED" twice`},
		"NUL in identifier": {with(func(t *jobguard.Table) { t.Name = "jo\x00bs" }), "Name \"jo\\x00bs\" contains a NUL byte"},
		"NUL in status":     {with(func(t *jobguard.Table) { t.Statuses.Failed = "FA\x00ILED" }), "Statuses.Failed \"FA\\x00ILED\" contains a NUL byte"},
		"too long name":     {with(func(t *jobguard.Table) { t.StatusColumn = strings.Repeat("s", 64) }), "longer than 63 bytes"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := jobguard.New(ctx, env.Pool, c.table)
			require.ErrorContains(t, err, c.want)
		})
	}
	_, err := jobguard.New(ctx, nil, def)
	require.ErrorContains(t, err, "db is nil")

	g, err := jobguard.New(ctx, env.Pool, jobguard.Table{Name: "enum_jobs", Statuses: jobguard.Statuses{Completed: "DONE"}})
	require.NoError(t, err, "an enum with every configured label is fine")
	require.False(t, g.Fenced())
}

func TestGuard_RefusesBadJobIDsBeforeSendingSQL(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		tx, err := jobs.Env.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()

		ids := []string{""}
		switch jobs.Name {
		case fixture.Default.Name, fixture.NoGeneration.Name:
			ids = append(ids, "not-a-uuid", "'; DROP TABLE jobs; --")
		case fixture.IntID.Name:
			ids = append(ids, "12a", "1 OR 1=1")
		}
		for _, id := range ids {
			err := jobs.Guard.CompleteIfActive(ctx, tx, jobguard.Execution{JobID: id})
			require.ErrorIs(t, err, jobguard.ErrInvalidJobID, "id %q", id)
			require.True(t, jobguard.IsPermanent(err))
		}
		// Nothing reached the server, so the transaction is still usable.
		require.NoError(t, tx.Commit(ctx))
	})
}

func TestNewStartGuard_RejectsBadOptions(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	_, err := jobguard.NewStartGuard(nil, env.Redis, jobguard.StartGuardConfig{})
	require.ErrorContains(t, err, "guard is nil")
	_, err = jobguard.NewStartGuard(jobs.Guard, nil, jobguard.StartGuardConfig{})
	require.ErrorContains(t, err, "Shared.Markers is MarkersRedis, but the Redis client is nil")
	_, err = jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{OnLookupError: 7})
	require.ErrorContains(t, err, "OnLookupError 7")
}

// The settings every process must agree on have one home, the guard: its
// defaults are the documented constants, a field set stays as set, and a
// prefix that cannot namespace a marker key is refused when the guard is
// built, before any component reads it.
func TestNewWithConfig_SharedSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)

	g, err := jobguard.New(ctx, env.Pool, jobs.Table)
	require.NoError(t, err)
	require.Equal(t, jobguard.Shared{
		Prefix: jobguard.PrefixDefault, ReclaimedReason: jobguard.ReclaimedReasonDefault,
		RescuedReason:   jobguard.RescuedReasonDefault,
		CancelledReason: jobguard.CancelledReasonDefault,
		NoticeChannel:   jobguard.NoticeChannelDefault, LeaderKey: jobguard.LeaderKeyDefault,
		Markers: jobguard.MarkersPostgres,
	}, g.Shared())

	g, err = jobguard.NewWithConfig(ctx, env.Pool, jobs.Table, jobguard.GuardConfig{
		Shared: jobguard.Shared{Prefix: "shop", LeaderKey: 42, Markers: jobguard.MarkersRedis}})
	require.NoError(t, err)
	require.Equal(t, "shop", g.Shared().Prefix)
	require.EqualValues(t, 42, g.Shared().LeaderKey)
	require.Equal(t, jobguard.ReclaimedReasonDefault, g.Shared().ReclaimedReason, "an unset field keeps its default")
	sg, err := jobguard.NewStartGuard(g, env.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	require.Equal(t, "shop:reclaimed:{j}:"+g.TableKey(), sg.Markers().Key("j"), "the start guard reads under the guard's prefix")

	for want, bad := range map[string]jobguard.Shared{
		"jobguard: new: Shared.Prefix":            {Prefix: "a{b}"},
		"Shared.Prefix \"jobs*\" contains a glob": {Prefix: "jobs*"},
		"Shared.NoticeChannel":                    {NoticeChannel: strings.Repeat("c", 64)},
		"could not be told apart":                 {CancelledReason: "reclaimed"},
		"Shared.CancelledReason":                  {CancelledReason: "bad \x00"},
	} {
		_, err = jobguard.NewWithConfig(ctx, env.Pool, jobs.Table, jobguard.GuardConfig{Shared: bad})
		require.ErrorContains(t, err, want)
	}
}

func TestGuard_ClosedConnectionIsAnErrorNotARefusal(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	pool := env.Connect(testenv.Config{})
	pool.Close()
	err := jobs.Guard.CompleteIfActive(context.Background(), pool, jobguard.Execution{JobID: id, Generation: 1})
	require.Error(t, err)
	require.NotErrorIs(t, err, jobguard.ErrJobTerminal)
	require.False(t, jobguard.IsPermanent(err), "a closed pool must leave the job retryable")
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
}

// A required column that admits NULL breaks the guard at run time, long
// after New: a NULL updated_at fails every sweep that reads the row, and a
// NULL generation makes every Start fail with a retryable error. New refuses
// such a column, names the Table field and gives the SQL that fixes it; the
// columns that are NULL by design stay accepted.
func TestNew_RefusesNullableRequiredColumnWithTheFix(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		tb := jobs.Table
		tbl := tb.QualifiedName()
		var pkey string
		require.NoError(t, jobs.Env.Pool.QueryRow(ctx,
			`SELECT conname FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'p'`, tbl).Scan(&pkey))
		jobs.Env.Exec(sqlf("ALTER TABLE %s DROP CONSTRAINT %s", tbl, quote(pkey))) // a key is never NULL

		required := []struct{ field, column string }{
			{"IDColumn", tb.IDColumn},
			{"StatusColumn", tb.StatusColumn},
			{"UpdatedAtColumn", tb.UpdatedAtColumn},
			{"GenerationColumn", tb.GenerationColumn},
			{"TypeColumn", tb.TypeColumn},
		}
		for _, c := range required {
			if c.column == "" {
				continue // the variant has no such column
			}
			id := jobs.Insert(t, fixture.Job{})
			jobs.Env.Exec(sqlf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", tbl, quote(c.column)))
			_, err := jobguard.New(ctx, jobs.Env.Pool, tb)
			require.Error(t, err, "%s %q admits NULL", c.field, c.column)
			msg := err.Error()
			require.Contains(t, msg, c.field)
			require.Contains(t, msg, sqlf("ALTER TABLE %s ALTER COLUMN %s", tbl, quote(c.column)))
			require.Contains(t, msg, "SET NOT NULL")

			// The SQL in the error fixes the table, and loses no row.
			_, fix, ok := strings.Cut(msg, "fix it with: ")
			require.True(t, ok, msg)
			jobs.Env.Exec(fix)
			_, err = jobguard.New(ctx, jobs.Env.Pool, tb)
			require.NoError(t, err, "after %s", fix)
			require.Equal(t, tb.Statuses.Processing, jobs.Read(t, id).Status)
		}

		// NULLs already in the generation column are filled in by the fix.
		if tb.GenerationColumn != "" {
			id := jobs.Insert(t, fixture.Job{})
			jobs.Env.Exec(sqlf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL, ALTER COLUMN %s DROP DEFAULT",
				tbl, quote(tb.GenerationColumn), quote(tb.GenerationColumn)))
			jobs.Env.Exec(sqlf("UPDATE %s SET %s = NULL", tbl, quote(tb.GenerationColumn)))
			_, err := jobguard.New(ctx, jobs.Env.Pool, tb)
			require.ErrorContains(t, err, "GenerationColumn")
			_, fix, _ := strings.Cut(err.Error(), "fix it with: ")
			jobs.Env.Exec(fix)
			_, err = jobguard.New(ctx, jobs.Env.Pool, tb)
			require.NoError(t, err)
			require.Zero(t, jobs.Read(t, id).Generation)
		}

		// NULL is part of these columns' meaning: no failure yet, no parent,
		// no start (Retry writes NULL there). A progress column is only
		// written, never read, so a NULL in it harms nothing.
		optional := []string{tb.FailureReasonColumn, tb.ParentIDColumn, tb.StartedAtColumn, tb.ProgressColumn}
		for _, col := range optional {
			if col != "" {
				jobs.Env.Exec(sqlf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", tbl, quote(col)))
			}
		}
		_, err := jobguard.New(ctx, jobs.Env.Pool, tb)
		require.NoError(t, err)
	})
}

// An integer id column is int2, int4 or int8; Prisma's Int @id is int4. An
// id past the column's range cannot name a row, so every entry point that
// takes one refuses it as ErrInvalidJobID (permanent) before sending SQL,
// rather than failing with the driver's encode error, which a queue retries
// forever.
func TestGuard_RefusesIntegerIDOutOfTheColumnsRange(t *testing.T) {
	t.Parallel()
	widths := []struct {
		typ             string
		max, outOfRange string
	}{
		{"serial", "2147483647", "2147483648"},
		{"smallserial", "32767", "-32769"},
	}
	for _, w := range widths {
		for _, simple := range []bool{false, true} {
			name := w.typ
			if simple {
				name += "/simple-protocol"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				env := testenv.New(t, testenv.Config{SimpleProtocol: simple})
				env.Exec(sqlf(`CREATE TABLE "Job" (
					"id" %s PRIMARY KEY,
					"status" text NOT NULL DEFAULT 'QUEUED',
					"generation" integer NOT NULL DEFAULT 0,
					"progress" integer NOT NULL DEFAULT 0,
					"failureReason" text,
					"updatedAt" timestamp(3) NOT NULL DEFAULT now())`, w.typ))
				env.Exec(`INSERT INTO "Job" ("status") VALUES ('PROCESSING')`)
				ctx := context.Background()
				guard, err := jobguard.NewWithConfig(ctx, env.Pool, jobguard.Table{Name: "Job",
					UpdatedAtColumn: "updatedAt", FailureReasonColumn: "failureReason",
					GenerationColumn: "generation", ProgressColumn: "progress"},
					jobguard.GuardConfig{Shared: jobguard.Shared{Prefix: env.Prefix, Markers: jobguard.MarkersRedis}})
				require.NoError(t, err)
				starts, err := jobguard.NewStartGuard(guard, env.Redis, jobguard.StartGuardConfig{})
				require.NoError(t, err)
				beats := heartbeat.New(guard, heartbeat.Config{})
				fin := jobguard.FinalizeSpec{Recheck: func(context.Context) error { return nil }}

				calls := map[string]func(db jobguard.DB, id string) error{
					"Start": func(db jobguard.DB, id string) error { _, err := starts.Start(ctx, db, id); return err },
					"Check": func(db jobguard.DB, id string) error { return starts.Check(ctx, db, id) },
					"CompleteIfActive": func(db jobguard.DB, id string) error {
						return guard.CompleteIfActive(ctx, db, jobguard.Execution{JobID: id})
					},
					"CompleteIfProcessing": func(db jobguard.DB, id string) error {
						return guard.CompleteIfProcessing(ctx, db, jobguard.Execution{JobID: id})
					},
					"CompleteTx": func(db jobguard.DB, id string) error {
						return guard.CompleteTx(ctx, db, jobguard.Execution{JobID: id}, func(pgx.Tx) error { return nil })
					},
					"Finalize": func(_ jobguard.DB, id string) error {
						// Finalize refuses a caller's transaction outright; on
						// the pool the id is what it refuses.
						_, err := guard.Finalize(ctx, env.Pool, jobguard.Execution{JobID: id}, fin)
						return err
					},
					"Fail":  func(db jobguard.DB, id string) error { return guard.Fail(ctx, db, jobguard.Execution{JobID: id}, "x") },
					"Retry": func(db jobguard.DB, id string) error { _, err := guard.Retry(ctx, db, id); return err },
					"Touch": func(db jobguard.DB, id string) error { return guard.Touch(ctx, db, jobguard.Execution{JobID: id}) },
					"TouchProgress": func(db jobguard.DB, id string) error {
						return guard.TouchProgress(ctx, db, jobguard.Execution{JobID: id}, 10)
					},
					"Beat": func(db jobguard.DB, id string) error {
						_, err := beats.Beat(ctx, db, jobguard.Execution{JobID: id}, heartbeat.Progress(10))
						return err
					},
					"FailIfUnchanged": func(db jobguard.DB, id string) error {
						_, err := jobset.New(guard).FailIfUnchanged(ctx, db, []jobset.Job{{ID: id, Status: "PROCESSING"}}, "x")
						return err
					},
				}
				tx, err := env.Pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				for name, call := range calls {
					err := call(tx, w.outOfRange)
					require.ErrorIs(t, err, jobguard.ErrInvalidJobID, "%s(%s)", name, w.outOfRange)
					require.True(t, jobguard.IsPermanent(err), name)
					require.ErrorContains(t, err, w.outOfRange, name)
				}
				err = guard.Touch(ctx, tx, jobguard.Execution{JobID: w.outOfRange})
				require.ErrorContains(t, err, sqlf(`%q is out of range for column "id"`, w.outOfRange))
				rows, err := jobset.New(guard).Snapshot(ctx, tx, []string{w.outOfRange, "1"})
				require.NoError(t, err)
				require.NotContains(t, rows, w.outOfRange)
				require.Contains(t, rows, "1")
				// Nothing reached the server, so the transaction is still usable.
				require.NoError(t, tx.Commit(ctx))

				// The largest id of the column is an id like any other: no
				// such row.
				err = guard.Fail(ctx, env.Pool, jobguard.Execution{JobID: w.max}, "x")
				require.ErrorIs(t, err, jobguard.ErrJobTerminal)
				require.NotErrorIs(t, err, jobguard.ErrInvalidJobID)
				var se *jobguard.StateError
				require.True(t, errors.As(err, &se))
				require.Equal(t, jobguard.ReasonNotFound, se.Reason)
			})
		}
	}
}

// The guard writes NULL to the failure reason (Retry, an orphan's reset),
// the start time (Retry) and the owner (Retry, a rescue, a start without
// an owner). A mapping whose column refuses NULL would pass New and then
// fail every such write at run time, so New refuses it with the fix.
func TestNew_RefusesNotNullColumnTheGuardClears(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		tb := jobs.Table
		tbl := tb.QualifiedName()
		cleared := []struct{ field, column string }{
			{"FailureReasonColumn", tb.FailureReasonColumn},
			{"StartedAtColumn", tb.StartedAtColumn},
			{"OwnerColumn", tb.OwnerColumn},
		}
		for _, c := range cleared {
			if c.column == "" {
				continue // the variant has no such column
			}
			jobs.Env.Exec(sqlf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL", tbl, quote(c.column)))
			_, err := jobguard.New(ctx, jobs.Env.Pool, tb)
			require.Error(t, err, "%s %q refuses NULL", c.field, c.column)
			msg := err.Error()
			require.Contains(t, msg, c.field)
			_, fix, ok := strings.Cut(msg, "fix it with: ")
			require.True(t, ok, msg)
			require.Contains(t, fix, "DROP NOT NULL")
			jobs.Env.Exec(fix)
			_, err = jobguard.New(ctx, jobs.Env.Pool, tb)
			require.NoError(t, err, "after %s", fix)
		}
	})
}
