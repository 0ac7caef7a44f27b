package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/watch"
)

// metricsURL waits for the service's "serving metrics" line and returns
// its URL.
func metricsURL(t *testing.T, logs *testenv.Logs) string {
	t.Helper()
	re := regexp.MustCompile(`msg="reclaimer: serving metrics" url=(\S+)`)
	var url string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(logs.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "no metrics line in %s", logs.String())
	return url
}

// scrape fetches the metrics page over HTTP.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// sample returns the value of the series of name whose labels include
// labels (as written in the exposition, e.g. `decision="reclaimed"`), and
// whether there is one.
func sample(page, name, labels string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{[^}]*` + regexp.QuoteMeta(labels) + `[^}]*\} (\S+)$`)
	m := re.FindStringSubmatch(page)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// The service counts its reclaims in the Prometheus page it serves, under
// the names docs/metrics.md gives.
func TestReclaimer_ServesMetricsForPrometheus(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	e, jobID := stuckChapterJob(t, env)

	ctx, cancel := context.WithCancel(context.Background())
	var logs testenv.Logs
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, args(env, "-interval", "100ms", "-no-progress", "300ms", "-limit", "chapter=300ms"), &logs)
	}()
	url := metricsURL(t, &logs)
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/metrics$`, url)
	before := scrape(t, url)
	// The endpoint serves before the reclaimer is built: the series may not
	// be there yet, and once it is, it starts at 0.
	n, _ := sample(before, "jobguard_reclaim_decisions_total", `decision="reclaimed"`)
	require.Zero(t, n, "nothing reclaimed yet:\n%s", before)

	waitStatus(t, e, jobID, "FAILED")
	var page string
	require.Eventually(t, func() bool {
		page = scrape(t, url)
		n, ok := sample(page, "jobguard_reclaim_decisions_total", `decision="reclaimed"`)
		return ok && n == 1
	}, 10*time.Second, 50*time.Millisecond, "the reclaim is not counted")
	// The sweeps' histogram counts every sweep, the reclaiming one with them.
	sweeps, ok := sample(page, "jobguard_reclaim_sweep_duration_seconds_count", `result="ok"`)
	require.True(t, ok, page)
	require.GreaterOrEqual(t, sweeps, 1.0)
	require.Contains(t, page, `otel_scope_name="github.com/jobguard/jobguard/reclaim"`)

	cancel()
	require.Equal(t, 0, <-done, logs.String())
	_, err := http.Get(url)
	require.Error(t, err, "the metrics server stops with the service")
}

// An empty -metrics-addr serves nothing.
func TestReclaimer_NoMetricsAddrServesNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	var logs testenv.Logs
	done := make(chan int, 1)
	go func() { done <- run(ctx, args(env, "-interval", "100ms", "-metrics-addr", ""), &logs) }()
	require.Eventually(t, func() bool { return regexp.MustCompile(`msg="reclaim: sweep"`).MatchString(logs.String()) },
		10*time.Second, 10*time.Millisecond)
	cancel()
	require.Equal(t, 0, <-done, logs.String())
	require.NotContains(t, logs.String(), "serving metrics")
}

// The service announces each reclaim, and a worker's watcher cancels the
// reclaimed execution's model call at once, over either transport.
func TestReclaimer_NoticesCancelTheReclaimedModelCall(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{flow.NoticesRedis, flow.NoticesPostgres} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			ctx := context.Background()
			w := newWorker(t, env, transport, nil)
			_, err := w.pool.Exec(ctx, `INSERT INTO courses (id, title) VALUES ('c1', 'Course')`)
			require.NoError(t, err)
			jobID, err := flow.EnqueueChapter(ctx, w.pool, "c1", 1)
			require.NoError(t, err)

			hang := sim.NewGate() // never released: only a cancellation ends the call
			chapters := &flow.Chapters{Guard: w.guard, Starts: w.starts, DB: w.pool, Watcher: w.watcher,
				Model: sim.Model{Call: sim.Call{Hang: hang}}}
			processed := make(chan error, 1)
			go func() {
				_, err := chapters.Process(ctx, jobID)
				processed <- err
			}()
			<-hang.Reached()

			runCtx, cancel := context.WithCancel(ctx)
			var logs testenv.Logs
			done := make(chan int, 1)
			go func() {
				done <- run(runCtx, args(env, "-interval", "100ms", "-no-progress", "300ms", "-limit", "chapter=300ms",
					"-notices", transport), &logs)
			}()
			defer func() { cancel(); require.Equal(t, 0, <-done, logs.String()) }()
			waitStatus(t, w, jobID, "FAILED")
			select {
			case err := <-processed:
				// The check runs hourly: only the notice can have been this
				// fast. The reclaim's time is the database's, and so is the
				// clock it is measured on.
				var sinceReclaim int64 // µs
				require.NoError(t, w.pool.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp() - updated_at) * 1e6)::int8
					FROM jobs WHERE id = $1`, jobID).Scan(&sinceReclaim))
				require.Less(t, time.Duration(sinceReclaim)*time.Microsecond, 2*time.Second)
				var lost *watch.LostError
				require.ErrorAs(t, err, &lost)
				require.Equal(t, watch.ViaNotice, lost.Via)
				require.Equal(t, int64(1), lost.Generation)
			case <-time.After(5 * time.Second):
				t.Fatal("the reclaimed model call was not cancelled")
			}
			var rows int
			require.NoError(t, w.pool.QueryRow(ctx, `SELECT count(*) FROM chapters`).Scan(&rows))
			require.Zero(t, rows)
		})
	}
}
