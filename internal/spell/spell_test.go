package spell

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSuggest(t *testing.T) {
	t.Parallel()
	commands := []string{"explain", "sweep", "limits", "retry", "run", "version", "help"}
	for _, tc := range []struct {
		given string
		known []string
		want  []string
	}{
		{"sweepp", commands, []string{"sweep"}},
		{"explian", commands, []string{"explain"}},
		{"retyr", commands, []string{"retry"}},
		{"rn", commands, []string{"run"}},
		{"explode", commands, nil},
		{"sweep", commands, nil},
		{"list", []string{"list", "set", "suggest"}, nil},
		{"lsit", []string{"list", "set", "suggest"}, []string{"list"}},
		{"dry-runn", []string{"dry-run", "json", "database-url"}, []string{"dry-run"}},
		{"coursejob", []string{"Course", "CourseJob", "jobs"}, []string{"CourseJob"}},
		{`"coursejob"`, []string{"CourseJob"}, []string{"CourseJob"}},
		{"COURSEJOB", []string{"CourseJob", "coursejob"}, []string{"CourseJob", "coursejob"}},
		{"updatedat", []string{"id", "updatedAt", "updated_at"}, []string{"updatedAt"}},
		{"updated", []string{"id", "updatedAt", "updated_at"}, []string{"updatedAt"}},
		{"statu", []string{"status", "stat", "state"}, []string{"stat", "state", "status"}},
		{"", []string{"a"}, nil},
		{"x", nil, nil},
	} {
		require.Equal(t, tc.want, Suggest(tc.given, tc.known), "%q among %q", tc.given, tc.known)
	}
}

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"abc", "abc", 0},
		{"abc", "acb", 1}, {"ca", "abc", 3}, {"kitten", "sitting", 3}, {"ü", "u", 1}, {"lsit", "list", 1},
	} {
		require.Equal(t, tc.want, distance(tc.a, tc.b), "%q, %q", tc.a, tc.b)
		require.Equal(t, tc.want, distance(tc.b, tc.a), "%q, %q", tc.b, tc.a)
	}
}

func TestHint(t *testing.T) {
	t.Parallel()
	require.Equal(t, `; did you mean "list"?`, Hint("lsit", []string{"list", "set"}, "%q"))
	require.Equal(t, "; did you mean --json or --jsn?", DidYouMean([]string{"json", "jsn"}, "--%s"))
	require.Empty(t, Hint("explode", []string{"list", "set"}, "%q"))
}
