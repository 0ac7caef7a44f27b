package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// binary is the command, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jobguard-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "jobguard")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build the command: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run of the command printed, and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// newCmd returns the command with args, its environment free of the
// JOBGUARD_ variables the test process may have, plus env.
func newCmd(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JOBGUARD_") && !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// jgEnv runs the command with env added to its environment and waits
// for it, at most 30 seconds.
func jgEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := newCmd(ctx, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	if err != nil && r.code < 0 {
		t.Fatalf("run %v: %v\n%s", args, err, r)
	}
	return r
}

// jg runs the command and waits for it.
func jg(t *testing.T, args ...string) result {
	t.Helper()
	return jgEnv(t, nil, args...)
}

// bundle is one test's jobs table, in a schema of its own, with a limits
// table beside it.
type bundle struct {
	env  *testenv.Env
	jobs *fixture.Jobs
}

// setup creates variant v's jobs table and the limits table (chapter: 30
// minutes) in a fresh schema.
func setup(t *testing.T, v fixture.Variant) *bundle {
	t.Helper()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, v)
	env.Exec(reclaim.Migration)
	env.Exec(`INSERT INTO job_type_limits VALUES ('chapter', interval '30 minutes')`)
	return &bundle{env: env, jobs: jobs}
}

// args are the flags that reach the bundle's servers, schema and Redis
// prefix, with the markers in Redis as the fixture's guards keep them, and
// map its table, followed by extra.
func (b *bundle) args(extra ...string) []string {
	args := []string{"--database-url", b.env.DatabaseURL, "--redis-url", b.env.RedisURL, "--markers", "redis",
		"--prefix", b.env.Prefix, "--notice-channel", b.env.Schema}
	args = append(args, tableArgs(b.jobs.Table)...)
	if b.jobs.Table.Schema == "" {
		args = append(args, "--schema", b.env.Schema) // so that the limits table is found there too
	}
	return append(args, extra...)
}

// run runs a command of the bundle: name, then the bundle's flags, then
// extra.
func (b *bundle) run(t *testing.T, name string, extra ...string) result {
	t.Helper()
	return jg(t, append(strings.Fields(name), b.args(extra...)...)...)
}

// tableArgs are the flags that map t, every column named, the absent ones
// as "".
func tableArgs(t jobguard.Table) []string {
	return []string{
		"--schema=" + t.Schema, "--table=" + t.Name, "--id-column=" + t.IDColumn, "--status-column=" + t.StatusColumn,
		"--updated-at-column=" + t.UpdatedAtColumn, "--failure-reason-column=" + t.FailureReasonColumn,
		"--generation-column=" + t.GenerationColumn, "--progress-column=" + t.ProgressColumn,
		"--type-column=" + t.TypeColumn, "--parent-id-column=" + t.ParentIDColumn,
		"--started-at-column=" + t.StartedAtColumn, "--owner-column=" + t.OwnerColumn,
		"--status-queued=" + t.Statuses.Queued, "--status-processing=" + t.Statuses.Processing,
		"--status-completed=" + t.Statuses.Completed, "--status-failed=" + t.Statuses.Failed,
	}
}

// closedPort is an address on which nothing listens: port 1 (tcpmux) is
// reserved and unused, and connecting to it is refused at once.
const closedPort = "127.0.0.1:1"

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jobguard.json")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}
