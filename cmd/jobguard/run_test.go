package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// runningService is a running 'jobguard run'.
type runningService struct {
	t    *testing.T
	logs *testenv.Logs
	done chan int
	stop func() // sends SIGTERM
}

// startService starts 'jobguard run' over the bundle, sweeping every
// 100ms, each sweep with a minute's deadline (a loaded machine must not
// time out a reclaim whose commit the server already made), with JSON
// logs, metrics on a port of its own and a leader key of its own, and
// kills it at cleanup if it still runs.
func startService(t *testing.T, b *bundle, extra ...string) *runningService {
	t.Helper()
	args := append([]string{"run"}, b.args(append([]string{"--interval", "100ms", "--sweep-timeout", "1m", "--metrics-addr", "127.0.0.1:0",
		"--log-format", "json", "--leader-key", fmt.Sprint(rand.Int64N(1<<62) + 1)}, extra...)...)...)
	cmd := newCmd(context.Background(), nil, args...)
	s := &runningService{t: t, logs: &testenv.Logs{}, done: make(chan int, 1)}
	cmd.Stdout, cmd.Stderr = io.Discard, s.logs
	require.NoError(t, cmd.Start())
	go func() {
		_ = cmd.Wait()
		s.done <- cmd.ProcessState.ExitCode()
	}()
	s.stop = func() { _ = cmd.Process.Signal(syscall.SIGTERM) }
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return s
}

// logged waits for a log line with msg, and returns it.
func (s *runningService) logged(msg string) map[string]any {
	s.t.Helper()
	var found map[string]any
	require.Eventually(s.t, func() bool {
		sc := bufio.NewScanner(strings.NewReader(s.logs.String()))
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
				found = line
				return true
			}
		}
		return false
	}, testenv.Patience, 20*time.Millisecond, "no log line %q in:\n%s", msg, s.logs)
	return found
}

// scrape reads the service's /metrics.
func (s *runningService) scrape() string {
	s.t.Helper()
	url := s.logged("jobguard: run: serving metrics")["url"].(string)
	resp, err := http.Get(url)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
	return string(body)
}

// terminate sends SIGTERM and returns the exit code and how long the
// service took to exit.
func (s *runningService) terminate() (int, time.Duration) {
	s.t.Helper()
	start := time.Now()
	s.stop()
	select {
	case code := <-s.done:
		return code, time.Since(start)
	case <-time.After(15 * time.Second):
		s.t.Fatalf("the service did not exit within 15s of SIGTERM:\n%s", s.logs)
		return -1, 0
	}
}

// counter is the value of a counter series in a scrape, matched by name
// and one label.
func counter(t *testing.T, scrape, name, label string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*` + regexp.QuoteMeta(label) + `[^}]*\} (\S+)$`).FindStringSubmatch(scrape)
	require.NotNil(t, m, "no series %s{%s} in:\n%s", name, label, scrape)
	return m[1]
}

// On a Prisma-style table, the service reclaims a stuck job and leaves a
// beating one, counts it on /metrics, and on SIGTERM stops promptly with
// exit code 0.
func TestRun_ReclaimsOnAPrismaTableServesMetricsAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Prisma)
	stuck := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	alive := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	b.jobs.Backdate(t, alive, "updatedAt", time.Minute)

	s := startService(t, b)
	require.Eventually(t, func() bool { return b.jobs.Read(t, stuck).Status == "FAILED" }, testenv.Patience, 20*time.Millisecond,
		"the stuck job is reclaimed:\n%s", s.logs)
	require.Equal(t, "PROCESSING", b.jobs.Read(t, alive).Status)
	require.Equal(t, "reclaimed: exceeded runtime limit without progress", b.jobs.Read(t, stuck).Reason)
	started := s.logged("jobguard: run: started")
	require.Equal(t, `"`+b.env.Schema+`"."CourseJob"`, started["table"])
	// The sweep's summary, and the markers before it, follow the commit.
	require.Eventually(t, func() bool { return strings.Contains(s.logs.String(), `"reclaimed":1`) }, testenv.Patience, 20*time.Millisecond)
	require.True(t, hasMarker(t, b, stuck))

	scrape := s.scrape()
	require.Equal(t, "1", counter(t, scrape, "jobguard_reclaim_decisions_total", `decision="reclaimed"`))
	require.NotEqual(t, "0", counter(t, scrape, "jobguard_reclaim_decisions_total", `decision="progressing"`))
	require.Contains(t, scrape, "jobguard_reclaim_sweep_duration_seconds_count")

	code, took := s.terminate()
	require.Equal(t, 0, code, s.logs.String())
	require.Less(t, took, 5*time.Second)
	t.Logf("exited %v after SIGTERM", took)
	s.logged("jobguard: run: stopped")
}

// With --shadow the service decides as a live one and writes nothing: no
// row (an audit trigger sees every write), no marker; it logs and counts
// what it would reclaim.
func TestRun_ShadowWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Prisma)
	stuck := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	written := b.env.Audit(b.jobs.Table.QualifiedName())

	s := startService(t, b, "--shadow")
	would := s.logged("reclaim: shadow: would reclaim")
	require.Equal(t, stuck, would["job_id"])
	require.Eventually(t, func() bool {
		return counterOrZero(s.scrape(), `decision="would_reclaim"`) != "0"
	}, testenv.Patience, 50*time.Millisecond)

	code, _ := s.terminate()
	require.Equal(t, 0, code, s.logs.String())
	require.Zero(t, written(), "a shadow service writes no row")
	require.Equal(t, "PROCESSING", b.jobs.Read(t, stuck).Status)
	require.False(t, hasMarker(t, b, stuck))
}

// A shadow service says which leader key it contends for and why it is
// not the one given: the live key with its top bit flipped, so that shadow
// and live reclaimers of one table each elect a leader of their own. Both
// keys are in its start line and in its line on taking the lead.
func TestRun_ShadowLogsItsLeaderKeyAsDerivedFromTheLiveOne(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	live := rand.Int64N(1<<62) + 1
	shadow := live ^ (-1 << 63)
	s := startService(t, b, "--shadow", "--leader-key", fmt.Sprint(live))
	s.logged("reclaim: leading the sweeps")
	for _, msg := range []string{"jobguard: run: started", "reclaim: leading the sweeps"} {
		line := rawLine(t, s.logs.String(), msg)
		require.Contains(t, line, fmt.Sprintf(`"leader_key":%d`, shadow), "%s", line)
		require.Contains(t, line, fmt.Sprintf(`"live_leader_key":%d`, live), "%s", line)
		require.Contains(t, line, `"leader_key_derived":"the live leader key with its top bit flipped`, "%s", line)
	}
	code, _ := s.terminate()
	require.Equal(t, 0, code, s.logs.String())
}

// rawLine is the first JSON log line of logs with msg, as written: its
// int64 values whole, which a float64 would round.
func rawLine(t *testing.T, logs, msg string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line struct{ Msg string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == msg {
			return sc.Text()
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, logs)
	return ""
}

// counterOrZero is the value of jobguard_reclaim_decisions_total{label},
// or "0" when the scrape has no such series yet.
func counterOrZero(scrape, label string) string {
	m := regexp.MustCompile(`(?m)^jobguard_reclaim_decisions_total\{[^}]*` + regexp.QuoteMeta(label) + `[^}]*\} (\S+)$`).FindStringSubmatch(scrape)
	if m == nil {
		return "0"
	}
	return m[1]
}

// A service that cannot start says why and exits 1: here, a limits table
// that does not exist.
func TestRun_CannotStartExits1(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	r := b.run(t, "run", "--metrics-addr", "", "--limits-table", "no_limits")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "the limits table "+b.env.Schema+".no_limits does not exist")
}

// With --compensate the service also undoes what a reclaimed execution
// left behind: the file artifact of the job it reclaims is removed. Without
// the artifacts table it does not start, and says how to create it.
func TestRun_CompensatesTheFilesOfReclaimedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, fixture.Prisma)
	r := b.run(t, "run", "--compensate", "--metrics-addr", "")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "create the artifacts table with compensate's migration")

	b.env.Exec(compensate.Migration)
	stuck := b.jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	file := filepath.Join(t.TempDir(), "encoded.mp4")
	require.NoError(t, os.WriteFile(file, []byte("late output"), 0o600))
	arts, err := compensate.New(ctx, compensate.Config{Guard: b.jobs.Guard, DB: b.env.Pool,
		Compensators: map[string]compensate.Func{"file": func(context.Context, pgx.Tx, compensate.Artifact) error { return nil }}})
	require.NoError(t, err)
	require.NoError(t, arts.Record(ctx, b.env.Pool, jobguard.Execution{JobID: stuck, Generation: 1}, "file", file))

	s := startService(t, b, "--compensate")
	require.Eventually(t, func() bool {
		_, err := os.Stat(file)
		return errors.Is(err, fs.ErrNotExist)
	}, testenv.Patience, 20*time.Millisecond, "the reclaimed execution's file is removed:\n%s", s.logs)
	require.Equal(t, "FAILED", b.jobs.Read(t, stuck).Status)
	code, _ := s.terminate()
	require.Equal(t, 0, code, s.logs.String())
}
