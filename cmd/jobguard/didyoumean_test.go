package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// A mistyped command or flag is answered with the one it most likely
// meant, and still exits 2.
func TestDidYouMean_MistypedCommandOrFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"sweepp"}, `unknown command "sweepp"; did you mean "sweep"?`},
		{[]string{"explian", "x"}, `unknown command "explian"; did you mean "explain"?`},
		{[]string{"limts", "list"}, `unknown command "limts"; did you mean "limits"?`},
		{[]string{"limits", "lsit"}, `unknown command "limits lsit"; did you mean "limits list"?`},
		{[]string{"sweep", "--dry-runn"}, "flag provided but not defined: -dry-runn; did you mean --dry-run?"},
		{[]string{"explain", "--updated-at-colum", "x", "c1"}, "did you mean --updated-at-column?"},
	} {
		r := jg(t, tc.args...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r)
		require.Contains(t, r.stderr, tc.says, "%v", tc.args)
	}
	r := jg(t, "explode")
	require.NotContains(t, r.stderr, "did you mean", "nothing is close: %s", r)
}

// A table or column named in the wrong case, or quoted as SQL would, is
// looked up in the catalog, and the error gives its exact spelling:
// PostgreSQL folds an unquoted CourseJob to coursejob, the mapping does
// not.
func TestDidYouMean_TableOrColumnInTheWrongCase(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Prisma)
	id := b.jobs.Insert(t, fixture.Job{})

	for _, name := range []string{"coursejob", `"CourseJob"`, "COURSEJOB", "CourseJobs"} {
		r := b.run(t, "explain", id, "--table", name)
		require.Equal(t, 1, r.code, r)
		require.Contains(t, r.stderr, `does not exist in schema "`+b.env.Schema+`"`, name)
		require.Contains(t, r.stderr, `did you mean Table.Name "CourseJob"?`, "%s: %s", name, r)
	}
	// The test's connection puts its schema on the search_path.
	r := b.run(t, "explain", id, "--schema", "", "--table", "coursejob")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `does not exist in search_path (Table.Name "coursejob"); did you mean Table.Name "CourseJob"?`, r)
	r = b.run(t, "explain", id, "--schema", strings.ToUpper(b.env.Schema), "--table", "coursejob")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `did you mean Table.Schema "`+b.env.Schema+`", Table.Name "CourseJob"?`, r)
	r = b.run(t, "explain", id, "--table", "widgets")
	require.Equal(t, 1, r.code, r)
	require.NotContains(t, r.stderr, "did you mean", "nothing is close: %s", r)

	r = b.run(t, "explain", id, "--updated-at-column", "updatedat")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `has no column "updatedat" (UpdatedAtColumn); did you mean "updatedAt"?`, r)
	r = b.run(t, "explain", id, "--updated-at-column", "updated_at")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `has no column "updated_at" (UpdatedAtColumn); did you mean "updatedAt"?`, r)
	r = b.run(t, "explain", id, "--updated-at-column", "modified_at")
	require.Equal(t, 1, r.code, r)
	require.NotContains(t, r.stderr, "did you mean", r)
}
