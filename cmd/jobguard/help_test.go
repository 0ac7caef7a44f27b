package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// --help lists every command and the exit codes, and every command has a
// --help of its own that exits 0 without reaching a server.
func TestHelp_EveryCommandHasOne(t *testing.T) {
	t.Parallel()
	r := jg(t, "--help")
	require.Equal(t, 0, r.code, r)
	for _, cmd := range commands() {
		require.Contains(t, r.stdout, "  "+cmd.name, "jobguard --help lists %s", cmd.name)
		help := jg(t, append(strings.Fields(cmd.name), "--help")...)
		require.Equal(t, 0, help.code, help)
		require.Contains(t, help.stdout, "Usage: jobguard "+cmd.name, help)
		require.Equal(t, help.stdout, jg(t, append([]string{"help"}, strings.Fields(cmd.name)...)...).stdout,
			"'jobguard help %s' is '%s --help'", cmd.name, cmd.name)
	}
	require.Contains(t, r.stdout, "Exit codes:")
	require.Contains(t, jg(t, "help", "config").stdout, `"started_at_column": "startedAt"`)
}

// A mistake on the command line exits 2, says what is wrong and where the
// help is, on stderr.
func TestUsage_MistakesExit2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "Usage:"},
		{[]string{"explode"}, `unknown command "explode"`},
		{[]string{"limits"}, "limits needs a subcommand"},
		{[]string{"limits", "drop"}, `unknown command "limits drop"`},
		{[]string{"explain"}, "explain takes one job id"},
		{[]string{"explain", "a", "b"}, "explain takes one job id"},
		{[]string{"explain", "--no-such-flag", "x"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"limits", "set", "chapter"}, "limits set takes a job type and a duration"},
		{[]string{"limits", "set", "chapter", "soon"}, `limit "soon": want a duration`},
		{[]string{"sweep", "--source", "kafka"}, `--source "kafka": want table, bullmq or river`},
		{[]string{"sweep", "--source", "bullmq"}, "--source bullmq needs --bullmq-queue"},
		{[]string{"run", "--shadow", "--compensate"}, "choose one"},
		{[]string{"run", "--log-format", "xml"}, `--log-format "xml"`},
		{[]string{"explain", "--config", "/no/such/file.json", "x"}, "--config: open /no/such/file.json"},
	} {
		r := jg(t, tc.args...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r)
		require.Contains(t, r.stderr, tc.says, "%v", tc.args)
		require.Empty(t, r.stdout, "%v", tc.args)
	}
}

// version prints what the build recorded, and parses as JSON with --json.
func TestVersion(t *testing.T) {
	t.Parallel()
	r := jg(t, "version")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "jobguard ")
	r = jg(t, "version", "--json")
	var v map[string]string
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r)
	require.NotEmpty(t, v["library"])
	require.Regexp(t, `^go1\.`, v["go"])
}
