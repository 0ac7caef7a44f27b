package bullmq_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/sourcetest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/bullmq"
)

// heldJob is a job the Node worker holds active, as BullMQ told it.
type heldJob struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	ProcessedOn int64  `json:"processedOn"`
	RowID       string `json:"rowId"`
}

type holding struct {
	BullMQ   string    `json:"bullmq"` // the version that ran
	Held     []heldJob `json:"held"`
	Finished []string  `json:"finished"`
}

// A major is one major version of BullMQ whose real worker the tests run:
// testdata/<folder> pins it in a package.json and its lock file, and
// testdata/install.mjs installs it there.
type major struct {
	folder  string // bullmq<major>
	version string // the major, as a version's first part
	once    sync.Once
	err     error
	out     []byte
}

// majors are the BullMQ majors the source is tested against.
var majors = []*major{
	{folder: "bullmq5", version: "5"},
	{folder: "bullmq6", version: "6"},
}

// eachMajor runs test once for each BullMQ major, as a parallel subtest
// named by its folder (TestX/bullmq6).
func eachMajor(t *testing.T, test func(t *testing.T, m *major)) {
	t.Helper()
	for _, m := range majors {
		t.Run(m.folder, func(t *testing.T) {
			t.Parallel()
			test(t, m)
		})
	}
}

// nodeOrSkip returns the node binary after making sure m is installed
// (install.mjs: npm ci from the lock file, once per lock file, so a run that
// finds it installed does not call npm). It skips the test only when Node.js
// or npm is not installed.
func nodeOrSkip(t *testing.T, m *major) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the BullMQ tests need Node.js")
	}
	m.once.Do(func() {
		// Every test of m waits here, so none runs while the install is half
		// done.
		cmd := exec.Command(node, "install.mjs", m.folder)
		cmd.Dir = "testdata"
		m.out, m.err = cmd.CombinedOutput()
	})
	if m.err != nil {
		if _, err := exec.LookPath("npm"); err != nil {
			t.Skip("npm is not installed; the BullMQ tests need it to install bullmq")
		}
		t.Fatalf("node install.mjs %s in reclaim/bullmq/testdata: %v\n%s", m.folder, m.err, m.out)
	}
	return node
}

// runBullMQ starts the Node script with BullMQ m against the test's Redis
// and waits for its report. The process is stopped at cleanup.
func runBullMQ(t *testing.T, m *major, env *testenv.Env, prefix, queue string, n int, mode string) holding {
	t.Helper()
	return runBullMQAt(t, m, env.RedisURL, prefix, queue, n, mode)
}

// runBullMQAt is runBullMQ against the Redis at url, which may name a Redis
// Cluster as hold.mjs describes.
func runBullMQAt(t *testing.T, m *major, url, prefix, queue string, n int, mode string) holding {
	t.Helper()
	node := nodeOrSkip(t, m)
	args := []string{"hold.mjs", m.folder, url, prefix, queue, itoa(n)}
	if mode != "" {
		args = append(args, mode)
	}
	cmd := exec.Command(node, args...)
	cmd.Dir = "testdata"
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = stdin.Close() // the script stops when stdin closes
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	lines := make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		if sc.Scan() {
			lines <- sc.Text()
		}
		for sc.Scan() {
		}
		_ = cmd.Wait()
	}()
	select {
	case line := <-lines:
		var h holding
		require.NoError(t, json.Unmarshal([]byte(line), &h), line)
		require.True(t, strings.HasPrefix(h.BullMQ, m.version+"."),
			"%s ran BullMQ %s, not %s.x", m.folder, h.BullMQ, m.version)
		return h
	case <-exited:
		t.Fatalf("node hold.mjs exited early: %s", stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("node hold.mjs did not report within a minute: %s", stderr.String())
	}
	return holding{}
}

func itoa(n int) string { return strconv.Itoa(n) }

func newSource(t *testing.T, env *testenv.Env, prefix, queue, field string) *bullmq.Source {
	t.Helper()
	src, err := bullmq.New(bullmq.Config{Redis: env.Redis, Prefix: prefix, Queue: queue, RowIDField: field})
	require.NoError(t, err)
	return src
}

func TestActive_ReadsJobsARealWorkerHolds(t *testing.T) {
	t.Parallel()
	eachMajor(t, func(t *testing.T, m *major) {
		env := testenv.New(t)
		prefix := env.Prefix + ":{bull}" // a Redis Cluster hash tag, as BullMQ needs there
		h := runBullMQ(t, m, env, prefix, "chapters", 3, "")
		require.Len(t, h.Held, 3)

		got, err := sourcetest.All(context.Background(), newSource(t, env, prefix, "chapters", ""), 2)
		require.NoError(t, err)
		want := make([]reclaim.ActiveJob, len(h.Held))
		for i, j := range h.Held {
			want[i] = reclaim.ActiveJob{ID: j.ID, Type: "chapter", StartedAt: time.UnixMilli(j.ProcessedOn)}
		}
		require.ElementsMatch(t, want, got, "processedOn of each held job, and no finished job")
		for _, j := range got {
			require.NotContains(t, h.Finished, j.ID)
		}

		byRow, err := sourcetest.All(context.Background(), newSource(t, env, prefix, "chapters", "rowId"), 2)
		require.NoError(t, err)
		var rows []string
		for _, j := range byRow {
			rows = append(rows, j.ID)
		}
		require.ElementsMatch(t, []string{"row-0", "row-1", "row-2"}, rows)
	})
}

func TestActive_ListedJobWithoutHashOrStartIsNotGuessed(t *testing.T) {
	t.Parallel()
	eachMajor(t, func(t *testing.T, m *major) {
		ctx := context.Background()
		env := testenv.New(t)
		prefix := env.Prefix + ":{bull}"
		h := runBullMQ(t, m, env, prefix, "chapters", 2, "")
		base := prefix + ":chapters:"
		// A job that left (its hash removed) while its id is still listed, and a
		// job whose hash has no processedOn.
		require.NoError(t, env.Redis.LPush(ctx, base+"active", "gone", "unstarted").Err())
		require.NoError(t, env.Redis.HSet(ctx, base+"unstarted", "name", "chapter", "data", `{}`).Err())

		got, err := sourcetest.All(ctx, newSource(t, env, prefix, "chapters", ""), 2)
		require.NoError(t, err)
		require.Len(t, got, 4)
		byID := map[string]reclaim.ActiveJob{}
		for _, j := range got {
			byID[j.ID] = j
		}
		require.ErrorIs(t, byID["gone"].Err, bullmq.ErrNoJobHash)
		require.NoError(t, byID["unstarted"].Err)
		require.True(t, byID["unstarted"].StartedAt.IsZero())
		require.Equal(t, time.UnixMilli(h.Held[0].ProcessedOn), byID[h.Held[0].ID].StartedAt)

		// Through a sweep: counted, skipped, nothing written.
		jobs := fixture.Create(t, env, fixture.TextID)
		r, err := reclaim.New(reclaim.Config{
			Guard: jobs.Guard, DB: env.Pool, Redis: env.Redis,
			Source: newSource(t, env, prefix, "chapters", ""),
			Limits: reclaim.StaticLimits{"chapter": time.Hour},
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		// The job without processedOn has no row to take a start from either.
		require.Equal(t, reclaim.Report{Scanned: 4, SourceErrors: 1, NotActive: 1, WithinLimit: 2}, rep)
	})
}

func TestActive_SnapshotIsConsistentWhileJobsLeave(t *testing.T) {
	t.Parallel()
	eachMajor(t, func(t *testing.T, m *major) {
		ctx := context.Background()
		env := testenv.New(t)
		prefix := env.Prefix + ":{bull}"
		runBullMQ(t, m, env, prefix, "churn", 8, "churn")
		src := newSource(t, env, prefix, "churn", "rowId")

		seen := 0
		for range 300 {
			got, err := sourcetest.All(ctx, src, 2)
			require.NoError(t, err)
			for _, j := range got {
				// Read in two steps (the list, then the hashes), a job finishing in
				// between would show up here without a hash.
				require.NoError(t, j.Err)
				require.False(t, j.StartedAt.IsZero(), "an active job always has processedOn")
				seen++
			}
		}
		require.NotZero(t, seen, "the worker kept jobs active while the source read")
	})
}

func TestSweep_ReclaimsJobsARealWorkerHolds(t *testing.T) {
	t.Parallel()
	eachMajor(t, func(t *testing.T, m *major) {
		ctx := context.Background()
		env := testenv.New(t)
		jobs := fixture.Create(t, env, fixture.TextID)
		for i := range 3 {
			jobs.Insert(t, fixture.Job{ID: "row-" + itoa(i), UpdatedAgo: 2 * time.Hour})
		}
		prefix := env.Prefix + ":{bull}"
		runBullMQ(t, m, env, prefix, "chapters", 3, "")

		r, err := reclaim.New(reclaim.Config{
			Guard: jobs.Guard, DB: env.Pool, Redis: env.Redis,
			Source: newSource(t, env, prefix, "chapters", "rowId"),
			Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute},
			// An hour later, by the reclaimer's clock: the held jobs are over
			// their limit and have not progressed.
			Now: func() time.Time { return time.Now().Add(time.Hour) },
		})
		require.NoError(t, err)
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, rep.Reclaimed)
		require.ElementsMatch(t, []string{"row-0", "row-1", "row-2"}, rep.ReclaimedIDs)
		require.Equal(t, "dead", jobs.Read(t, "row-1").Status)
	})
}

func TestNew_ErrorsNameTheField(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	_, err := bullmq.New(bullmq.Config{Queue: "q"})
	require.ErrorContains(t, err, "Redis")
	_, err = bullmq.New(bullmq.Config{Redis: env.Redis})
	require.ErrorContains(t, err, "Queue")
	_, err = bullmq.New(bullmq.Config{Redis: env.Redis, Queue: "a:b"})
	require.ErrorContains(t, err, "Queue")
}

func TestActive_RowIDFromData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	base := env.Prefix + ":{bull}:q:"
	started := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli())
	ms := strconv.FormatInt(started.UnixMilli(), 10)
	for i, data := range []string{`{"rowId":"row-1"}`, `{"rowId":42}`, `{}`, `not json`, `{"rowId":1.5}`} {
		id := strconv.Itoa(i + 1)
		require.NoError(t, env.Redis.HSet(ctx, base+id, "name", "chapter", "processedOn", ms, "data", data).Err())
		require.NoError(t, env.Redis.RPush(ctx, base+"active", id).Err())
	}
	got, err := sourcetest.All(ctx, newSource(t, env, env.Prefix+":{bull}", "q", "rowId"), 2)
	require.NoError(t, err)
	require.Len(t, got, 5)
	byID := map[string]reclaim.ActiveJob{}
	for _, j := range got {
		byID[j.ID] = j
	}
	require.Equal(t, reclaim.ActiveJob{ID: "row-1", Type: "chapter", StartedAt: started}, byID["row-1"])
	require.Equal(t, reclaim.ActiveJob{ID: "42", Type: "chapter", StartedAt: started}, byID["42"])
	for _, id := range []string{"3", "4", "5"} {
		require.Error(t, byID[id].Err, "a job whose row cannot be named is skipped, not guessed")
		require.Contains(t, byID[id].Err.Error(), "job "+id, "the BullMQ id names it")
	}
}

func TestActive_UnreachableRedisFailsTheRead(t *testing.T) {
	t.Parallel()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	src, err := bullmq.New(bullmq.Config{Redis: down, Queue: "q"})
	require.NoError(t, err)
	_, err = sourcetest.All(context.Background(), src, 2)
	require.ErrorContains(t, err, "bullmq: read bull:q:active")
}

// A worker that stores the generation Start returned in its job's data
// names the execution each listing runs.
func TestActive_GenerationFromData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	base := env.Prefix + ":{bull}:q:"
	ms := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
	for i, data := range []string{`{"rowId":"row-1","generation":7}`, `{"rowId":"row-2"}`, `{"rowId":"row-3","generation":"7"}`, `{"rowId":"row-4","generation":-1}`} {
		id := strconv.Itoa(i + 1)
		require.NoError(t, env.Redis.HSet(ctx, base+id, "name", "chapter", "processedOn", ms, "data", data).Err())
		require.NoError(t, env.Redis.RPush(ctx, base+"active", id).Err())
	}
	src, err := bullmq.New(bullmq.Config{Redis: env.Redis, Prefix: env.Prefix + ":{bull}", Queue: "q",
		RowIDField: "rowId", GenerationField: "generation"})
	require.NoError(t, err)
	got, err := sourcetest.All(ctx, src, 3)
	require.NoError(t, err)
	require.Len(t, got, 4)
	byID := map[string]reclaim.ActiveJob{}
	for _, j := range got {
		byID[j.ID] = j
	}
	require.EqualValues(t, 7, byID["row-1"].Generation)
	require.NoError(t, byID["row-1"].Err)
	require.Zero(t, byID["row-2"].Generation, "no field: the generation is unknown")
	require.NoError(t, byID["row-2"].Err)
	require.ErrorContains(t, byID["row-3"].Err, "generation", "a generation that is not a number is not guessed")
	require.ErrorContains(t, byID["row-4"].Err, "generation")
}
