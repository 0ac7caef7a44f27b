package jobguard_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// A table that has a column under an optional column's default name,
// which the mapping leaves out, is named by New: in Unmapped, and in a
// warning on the guard's logger that says which field to set. A full
// mapping is quiet.
func TestNew_WarnsOfAColumnWithADefaultNameTheMappingLeavesOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(jobguard.Migration)

	logs := &testenv.Logs{}
	g, err := jobguard.NewWithConfig(ctx, env.Pool, jobguard.Table{}, jobguard.GuardConfig{Logger: logs.Logger()})
	require.NoError(t, err, "leaving an optional column out is allowed")
	require.Equal(t, []jobguard.UnmappedColumn{
		{Field: "GenerationColumn", Column: jobguard.GenerationColumnDefault},
		{Field: "ProgressColumn", Column: jobguard.ProgressColumnDefault},
		{Field: "TypeColumn", Column: jobguard.TypeColumnDefault},
		{Field: "ParentIDColumn", Column: jobguard.ParentIDColumnDefault},
		{Field: "StartedAtColumn", Column: jobguard.StartedAtColumnDefault},
		{Field: "OwnerColumn", Column: jobguard.OwnerColumnDefault},
	}, g.Unmapped())
	require.Contains(t, logs.String(), `level=WARN`)
	require.Contains(t, logs.String(), `set Table.TypeColumn to \"type\"`)
	require.Contains(t, logs.String(), `set Table.GenerationColumn to \"generation\"`)
	require.Contains(t, logs.String(), `set Table.OwnerColumn to \"lease_id\"`)

	quiet := &testenv.Logs{}
	g, err = jobguard.NewWithConfig(ctx, env.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Logger: quiet.Logger()})
	require.NoError(t, err)
	require.Empty(t, g.Unmapped())
	require.Empty(t, quiet.String())
}

// A column under a default name whose type the field cannot take is some
// other column of the user's, and is not named.
func TestNew_AColumnWithADefaultNameButAnotherTypeIsNotNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(`CREATE TABLE files (id uuid PRIMARY KEY, status text NOT NULL, updated_at timestamptz NOT NULL,
		failure_reason text, type integer NOT NULL, progress jsonb, started_at text)`)
	logs := &testenv.Logs{}
	g, err := jobguard.NewWithConfig(ctx, env.Pool, jobguard.Table{Name: "files"}, jobguard.GuardConfig{Logger: logs.Logger()})
	require.NoError(t, err)
	require.Empty(t, g.Unmapped())
	require.Empty(t, logs.String())
}

// A mapped column the table lacks is refused with the way out: for the
// columns the guard fills itself, the SQL and the Prisma schema line that
// add it; for every optional one, that the field may be left empty.
func TestNew_AMissingOptionalColumnSaysHowToAddItOrLeaveItOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(`CREATE TABLE "CourseJob" ("id" text PRIMARY KEY, "status" text NOT NULL,
		"updatedAt" timestamp(3) NOT NULL, "failureReason" text)`)
	base := jobguard.Table{Name: "CourseJob", UpdatedAtColumn: "updatedAt", FailureReasonColumn: "failureReason"}
	with := func(f func(*jobguard.Table)) jobguard.Table { t := base; f(&t); return t }
	for name, c := range map[string]struct {
		table jobguard.Table
		want  []string
	}{
		"generation": {with(func(t *jobguard.Table) { t.GenerationColumn = "generation" }), []string{
			`table "CourseJob" has no column "generation" (GenerationColumn)`,
			`ALTER TABLE "CourseJob" ADD COLUMN "generation" integer NOT NULL DEFAULT 0`,
			`generation Int @default(0)`,
			`leave GenerationColumn empty`,
		}},
		"started at": {with(func(t *jobguard.Table) { t.StartedAtColumn = "startedAt" }), []string{
			`ALTER TABLE "CourseJob" ADD COLUMN "startedAt" timestamptz`,
			`startedAt DateTime?`,
			`leave StartedAtColumn empty`,
		}},
		"progress": {with(func(t *jobguard.Table) { t.ProgressColumn = "progress" }), []string{
			`has no column "progress" (ProgressColumn)`,
			`leave ProgressColumn empty`,
		}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := jobguard.New(ctx, env.Pool, c.table)
			require.Error(t, err)
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
