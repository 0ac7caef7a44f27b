package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

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

// version prints what a bug report needs: the command's and the library's
// versions, the build's VCS revision, time and dirty flag, Go's version
// and the platform; --json says the same. A build that recorded no
// revision (a workspace build without -buildvcs=true) says so and how to
// get one.
func TestVersion_NamesTheBuild(t *testing.T) {
	t.Parallel()
	r := jg(t, "version")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^jobguard \S+$`, r.stdout)
	require.Regexp(t, `(?m)^  library +\S+`, r.stdout)
	require.Regexp(t, `(?m)^  revision +not recorded \(build with -buildvcs=true\)$`, r.stdout)
	require.Regexp(t, `(?m)^  go +go1\.\S+ `+runtime.GOOS+`/`+runtime.GOARCH+`$`, r.stdout)
	r = jg(t, "version", "--json")
	require.Equal(t, 0, r.code, r)
	var v buildInfo
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r)
	require.NotEmpty(t, v.Library)
	require.Regexp(t, `^go1\.`, v.Go)
	require.Equal(t, runtime.GOOS, v.OS)
	require.Equal(t, runtime.GOARCH, v.Arch)
	require.Nil(t, v.Revision)
	require.Nil(t, v.Modified)

	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): no revision to stamp", err)
	}
	status, err := exec.Command("git", "status", "--porcelain").Output()
	require.NoError(t, err)
	stamped := filepath.Join(t.TempDir(), "jobguard")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", stamped, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	got, err := exec.Command(stamped, "version", "--json").Output()
	require.NoError(t, err)
	v = buildInfo{}
	require.NoError(t, json.Unmarshal(got, &v), "%s", got)
	require.NotNil(t, v.Revision, "%s", got)
	require.Equal(t, strings.TrimSpace(string(head)), *v.Revision)
	require.NotNil(t, v.Time, "%s", got)
	_, err = time.Parse(time.RFC3339, *v.Time)
	require.NoError(t, err)
	require.NotNil(t, v.Modified, "%s", got)
	require.Equal(t, len(status) > 0, *v.Modified)
	text, err := exec.Command(stamped, "version").Output()
	require.NoError(t, err)
	require.Regexp(t, `(?m)^  revision +`+*v.Revision+` \(`+regexp.QuoteMeta(*v.Time)+`\)`, string(text))
}
