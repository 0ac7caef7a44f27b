package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
)

// The config file's table is mapped as a jobguard.Table literal of what it
// names; the rest keeps its default; flags given after it win.
func TestSettings_ConfigFileThenFlags(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `{
		"table": {"name": "CourseJob", "updated_at_column": "updatedAt", "generation_column": "",
		          "statuses": {"failed": "DEAD"}},
		"shared": {"prefix": "app", "leader_key": 42},
		"reclaim": {"no_progress": "20m", "page_size": 500},
		"source": {"kind": "river", "river": {"queues": ["a", "b"], "kinds": {"chapter_args": "chapter"}}},
		"parent_rules": {"chapter": {"table": "courses", "column": "status", "value": "FAILED", "from": ["GENERATING"]}}
	}`)
	args := []string{"--table", "Jobs", "--config", path, "x"}
	s, err := loadSettings(args, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, "CourseJob", s.Table.Name)
	require.Equal(t, "updatedAt", s.Table.UpdatedAtColumn)
	require.Empty(t, s.Table.GenerationColumn, `"" makes the column absent`)
	require.Empty(t, s.Table.StartedAtColumn, "an optional column left out is absent, as in a jobguard.Table")
	require.Equal(t, "status", s.Table.StatusColumn, "a required column left out takes its default name")
	require.Equal(t, "DEAD", s.Table.Statuses.Failed)
	require.Equal(t, "QUEUED", s.Table.Statuses.Queued)
	require.Equal(t, "app", s.Shared.Prefix)
	require.EqualValues(t, 42, s.Shared.LeaderKey)
	require.Equal(t, 20*time.Minute, s.NoProgress)
	require.Equal(t, 500, s.PageSize)
	require.Equal(t, sourceRiver, s.Source)
	require.Equal(t, []string{"a", "b"}, s.River.Queues)
	require.Equal(t, map[string]string{"chapter_args": "chapter"}, s.River.Types)
	require.Equal(t, []string{"GENERATING"}, s.ParentRules["chapter"].From)

	f := newFlags("test")
	f.commonGroups(&s)
	f.decisionGroup(&s, false)
	rest, err := f.parse(args)
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, rest)
	require.Equal(t, "Jobs", s.Table.Name, "a flag overrides the file")
	require.Equal(t, "updatedAt", s.Table.UpdatedAtColumn)
}

// A misspelt field, or a duration that is not one, is an error that names
// it, not a silent default.
func TestSettings_ConfigFileMistakes(t *testing.T) {
	t.Parallel()
	for content, says := range map[string]string{
		`{"table": {"updated_column": "updatedAt"}}`: `unknown field "updated_column"`,
		`{"reclaim": {"no_progress": 900}}`:          `a duration is a string such as "15m", not 900`,
		`{"reclaim": {"interval": "soon"}}`:          `time: invalid duration "soon"`,
		`{"table": `:                                 "unexpected EOF",
	} {
		_, err := loadSettings([]string{"--config=" + writeConfig(t, content)}, func(string) string { return "" })
		require.ErrorContains(t, err, says, content)
		require.Equal(t, exitUsage, exitCode(err))
	}
}

// Flags and arguments mix in any order; "--" ends the flags.
func TestFlags_ArgumentsAnywhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		rest []string
		json bool
	}{
		{[]string{"id1", "--json"}, []string{"id1"}, true},
		{[]string{"--json", "id1"}, []string{"id1"}, true},
		{[]string{"type", "--json", "45m"}, []string{"type", "45m"}, true},
		{[]string{"--", "--json"}, []string{"--json"}, false},
		{[]string{"id1", "--", "-x"}, []string{"id1", "-x"}, false},
	} {
		s := defaultSettings()
		f := newFlags("test")
		f.outputGroup(&s, false)
		rest, err := f.parse(tc.args)
		require.NoError(t, err, "%v", tc.args)
		require.Equal(t, tc.rest, rest, "%v", tc.args)
		require.Equal(t, tc.json, s.JSON, "%v", tc.args)
	}
}

// The value of --config is found before the flags are parsed, in each of
// its spellings.
func TestConfigArg(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--config", "a.json"}, {"-config", "a.json"}, {"--config=a.json"}, {"x", "--json", "--config", "a.json"},
	} {
		path, ok := configArg(args)
		require.True(t, ok, "%v", args)
		require.Equal(t, "a.json", path, "%v", args)
	}
	_, ok := configArg([]string{"--", "--config", "a.json"})
	require.False(t, ok, "after --, it is an argument")
	_, ok = configArg([]string{"--configuration", "a.json"})
	require.False(t, ok)
}

// Without a table in the config file or any table flag, the table is the
// bundled migration's; a table flag alone maps a table of the user's, as
// the config file's "table" does: an optional column not named is absent.
func TestSettings_TableFlagsMapATableOfTheirOwn(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) settings {
		s, err := loadSettings(args, func(string) string { return "" })
		require.NoError(t, err)
		f := newFlags("test")
		f.commonGroups(&s)
		_, err = f.parse(args)
		require.NoError(t, err)
		s.ownTable(f)
		return s
	}
	require.Equal(t, jobguard.DefaultTable(), parse().Table)
	s := parse("--table", "CourseJob", "--type-column", "kind")
	require.Equal(t, jobguard.Table{Name: "CourseJob", TypeColumn: "kind"}.WithDefaults(), s.Table)
}
