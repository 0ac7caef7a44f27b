package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/service"
	"github.com/jobguard/jobguard/internal/testkit/netproxy"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/retain"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// deploy/ holds what an operator loads: the alerting rules and the Grafana
// dashboard. The tests here hold every name they query to the service's
// real /metrics page, and that page to the instrument table of
// docs/metrics.md, which is the one list of instruments.
var (
	rulesPath     = filepath.Join("..", "..", "deploy", "prometheus", "jobguard-alerts.yml")
	dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "jobguard-dashboard.json")
)

// rule is one rule of the rules file.
type rule struct {
	// Name is the alert's (or recording rule's) name.
	Name string
	// Expr is its PromQL expression.
	Expr string
	// Text is the rule's lines as written.
	Text string
}

var (
	ruleStart = regexp.MustCompile(`^\s*- (?:alert|record):\s*(\S+)\s*$`)
	exprLine  = regexp.MustCompile(`^(\s*)expr:\s*(.*)$`)
)

// readRules reads the rules of a Prometheus rules file, as this project
// writes them: each expr inline or as a block scalar (expr: |). The
// module has no YAML parser; promtool, which has, checks the file itself.
func readRules(path string) ([]rule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rules []rule
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		if m := ruleStart.FindStringSubmatch(lines[i]); m != nil {
			rules = append(rules, rule{Name: m[1]})
		}
		if len(rules) == 0 {
			continue
		}
		r := &rules[len(rules)-1]
		r.Text += lines[i] + "\n"
		m := exprLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if r.Expr != "" {
			return nil, fmt.Errorf("%s: rule %s has two exprs", path, r.Name)
		}
		if v := strings.TrimSpace(m[2]); !strings.HasPrefix(v, "|") && !strings.HasPrefix(v, ">") {
			r.Expr = strings.Trim(v, `'"`)
			continue
		}
		var block []string
		for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || indent(lines[i+1]) > len(m[1])) {
			i++
			r.Text += lines[i] + "\n"
			block = append(block, strings.TrimSpace(lines[i]))
		}
		r.Expr = strings.TrimSpace(strings.Join(block, "\n"))
	}
	for _, r := range rules {
		if r.Expr == "" {
			return nil, fmt.Errorf("%s: rule %s has no expr", path, r.Name)
		}
	}
	return rules, nil
}

func indent(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *datasource `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	require.NotEmpty(t, d.Panels)
	return d
}

// panels returns every panel that shows data, those of collapsed rows too.
func (d dashboard) panels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

var labelValues = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// queries returns every PromQL query of the dashboard by where it stands.
// A variable's label_values(selector, label) is read as the query
// count by (label) (selector), which asks Prometheus for the same names.
func (d dashboard) queries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			out[fmt.Sprintf("dashboard panel %q query %s", p.Title, tg.RefID)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct{ Query string }
			require.NoError(t, json.Unmarshal(v.Query, &obj), "variable %s", v.Name)
			q = obj.Query
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = fmt.Sprintf("count by (%s) (%s)", m[2], m[1])
		}
		out[fmt.Sprintf("dashboard variable %s", v.Name)] = q
	}
	return out
}

// deployQueries returns every query of the rules and the dashboard.
func deployQueries(t *testing.T) map[string]string {
	t.Helper()
	rules, err := readRules(rulesPath)
	require.NoError(t, err)
	require.NotEmpty(t, rules)
	queries := readDashboard(t).queries(t)
	for _, r := range rules {
		queries["rule "+r.Name] = r.Expr
	}
	return queries
}

func documentedInstruments(t *testing.T) []instrument {
	t.Helper()
	doc, err := os.ReadFile(docsPath)
	require.NoError(t, err)
	docs, err := parseInstruments(string(doc))
	require.NoError(t, err)
	return docs
}

// drivenScrape runs the reclaimer service and a worker as they run in
// production, each serving its metrics as the service does, drives every
// path that records an instrument, and returns both scrapes, read.
//
// A counter appears on the page only once it has counted something, so
// each step below records at least one family. The service's Redis goes
// through a proxy that is closed once the service has started: its
// reclaim's marker and notice then fail, as in a Redis outage.
func drivenScrape(t *testing.T) exposition {
	t.Helper()
	env := testenv.New(t)
	ctx := context.Background()

	// The worker: the guards, the heartbeat, the compensations and a usage
	// ledger, on a metrics server like the service's own.
	wm, err := service.ServeMetrics("127.0.0.1:0", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, wm.Shutdown(context.Background())) })
	w := newWorker(t, env, flow.NoticesOff, wm.Provider)
	_, err = w.pool.Exec(ctx, `INSERT INTO courses (id, title) VALUES ('c1', 'Course'), ('c2', 'Course')`)
	require.NoError(t, err)

	// A job that runs to its end: a heartbeat written, a completion
	// accepted, its usage accrued and a replay of the accrual caught.
	jobID, err := flow.EnqueueChapter(ctx, w.pool, "c1", 1)
	require.NoError(t, err)
	exec, err := w.starts.Start(ctx, w.pool, jobID)
	require.NoError(t, err)
	beat, err := w.heartbeat.Beat(ctx, w.pool, exec, heartbeat.Progress(50))
	require.NoError(t, err)
	require.Equal(t, heartbeat.Written, beat)
	fin, err := w.guard.Finalize(ctx, w.pool, exec, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	require.True(t, fin.Confirmed())
	ledger, err := usage.NewLedger(usage.Config{MeterProvider: wm.Provider})
	require.NoError(t, err)
	entry := usage.Entry{Account: "a1", Meter: "tokens", Quantity: 10}
	for _, want := range []bool{true, false} {
		acc, err := ledger.Accrue(ctx, w.pool, fin, entry, nil)
		require.NoError(t, err)
		require.Equal(t, want, acc.Accrued)
	}

	// Two jobs finalized through a settler: one settled at once, one whose
	// update fails the first time, left to a sweep that settles it.
	driveSettle(t, w, wm.Provider, [2]string{"c1", "c2"})

	// A job started by a start guard whose Redis does not answer: the
	// failed marker lookup is counted and, failing open, the job starts.
	// It then hangs, having made a file.
	dead := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	blind, err := jobguard.NewStartGuard(w.guard, dead, jobguard.StartGuardConfig{
		Logger: slog.New(slog.DiscardHandler), MeterProvider: wm.Provider})
	require.NoError(t, err)
	stuckID, err := flow.EnqueueChapter(ctx, w.pool, "c2", 1)
	require.NoError(t, err)
	stuck, err := blind.Start(ctx, w.pool, stuckID)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "chapter.txt")
	require.NoError(t, w.artifacts.Record(ctx, w.pool, stuck, flow.KindFile, file))
	require.NoError(t, os.WriteFile(file, []byte("week 1"), 0o644))

	// The service, limits from the table (chapter has none yet: every sweep
	// counts the job as unknown_type), Redis behind the proxy.
	ru, err := url.Parse(env.RedisURL)
	require.NoError(t, err)
	proxy := netproxy.New(t, ru.Host)
	ru.Host = proxy.Addr()
	runCtx, cancel := context.WithCancel(ctx)
	var logs testenv.Logs
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, args(env, "-redis", ru.String(), "-interval", "100ms", "-no-progress", "300ms"), &logs)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			require.Equal(t, 0, <-done, logs.String())
		}
	}
	t.Cleanup(stop)
	serviceURL := metricsURL(t, &logs)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `msg="reclaimer: started"`) },
		testenv.Patience, 10*time.Millisecond)
	proxy.Close()
	require.NoError(t, flow.SetLimit(ctx, w.pool, flow.TypeChapter, 300*time.Millisecond))
	waitStatus(t, w, stuckID, "FAILED")
	var page string
	require.Eventually(t, func() bool {
		page = scrape(t, serviceURL)
		_, markers := sample(page, "jobguard_reclaim_marker_errors_total", "")
		_, notices := sample(page, "jobguard_reclaim_notice_errors_total", "")
		// A sweep's duration is recorded when it ends, after its marker and
		// notice errors: wait for the sweep that reclaimed to be over.
		_, swept := sample(page, "jobguard_reclaim_sweep_duration_seconds_count", "")
		return markers && notices && swept
	}, testenv.Patience, 50*time.Millisecond, "the reclaim's marker and notice errors are not counted:\n%s", logs.String())
	stop()

	// The late execution: its completion is refused, the job's redelivery
	// is refused, and the file it made is compensated.
	require.ErrorIs(t, w.guard.CompleteIfActive(ctx, w.pool, stuck), jobguard.ErrJobTerminal)
	_, err = w.starts.Start(ctx, w.pool, stuckID)
	require.ErrorIs(t, err, jobguard.ErrReclaimed)
	rep, err := w.artifacts.CompensateExecution(ctx, stuck)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Compensated)
	require.NoFileExists(t, file)

	return parseExposition(page, scrape(t, "http://"+wm.Addr+"/metrics"))
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Every metric, label and attribute value the alert rules and the
// dashboard query is one the service and a worker really export, under
// the names docs/metrics.md gives; and docs/metrics.md lists exactly the
// jobguard families of their pages.
func TestDeploy_QueriesOnlyWhatTheServiceExports(t *testing.T) {
	t.Parallel()
	docs := documentedInstruments(t)
	got := drivenScrape(t)
	problems := compareWithDocs(docs, got)
	require.Empty(t, problems, "docs/metrics.md and the scrape disagree:\n%s", strings.Join(problems, "\n"))
	problems = checkQueries(deployQueries(t), docs, got)
	require.Empty(t, problems, "deploy/ queries what the service does not export:\n%s", strings.Join(problems, "\n"))
}

// The dashboard has a panel for every documented instrument, reads every
// panel from the datasource variable, and gives every panel a unit and a
// description.
func TestDeploy_DashboardShowsEveryInstrument(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	var variable bool
	for _, v := range d.Templating.List {
		var q string
		if v.Type == "datasource" && json.Unmarshal(v.Query, &q) == nil && q == "prometheus" {
			variable = v.Name == "datasource"
		}
		if v.Datasource != nil {
			require.Equal(t, datasource{Type: "prometheus", UID: "${datasource}"}, *v.Datasource, "variable %s", v.Name)
		}
	}
	require.True(t, variable, "no datasource variable of type prometheus named datasource")

	var all strings.Builder
	for _, p := range d.panels() {
		require.NotNil(t, p.Datasource, p.Title)
		require.Equal(t, datasource{Type: "prometheus", UID: "${datasource}"}, *p.Datasource, p.Title)
		require.NotEmpty(t, p.FieldConfig.Defaults.Unit, "panel %q has no unit", p.Title)
		require.NotEmpty(t, p.Description, "panel %q says nothing of what it shows", p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			require.NotNil(t, tg.Datasource, p.Title)
			require.Equal(t, *p.Datasource, *tg.Datasource, p.Title)
			all.WriteString(tg.Expr + "\n")
		}
	}
	for _, in := range documentedInstruments(t) {
		name, _, err := in.family()
		require.NoError(t, err)
		shown := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `(_bucket|_sum|_count)?\b`).MatchString(all.String())
		require.True(t, shown, "no panel shows %s (%s)", in.Name, name)
	}
}

// Every alert carries a severity, and a summary and a description that say
// what it means and what to do.
func TestDeploy_AlertsSayWhatToDo(t *testing.T) {
	t.Parallel()
	rules, err := readRules(rulesPath)
	require.NoError(t, err)
	require.NotEmpty(t, rules)
	for _, r := range rules {
		require.Regexp(t, `(?m)^\s+severity: (critical|warning|info)$`, r.Text, r.Name)
		require.Regexp(t, `(?m)^\s+summary: \S`, r.Text, r.Name)
		require.Regexp(t, `(?m)^\s+description: >-\n\s+\S`, r.Text, r.Name)
	}
}

// The rules reader reads inline and block expressions, and refuses a rule
// without one.
func TestReadRules_ReadsInlineAndBlockExprs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yml")
	require.NoError(t, os.WriteFile(path, []byte(`groups:
  - name: g
    rules:
      - alert: Inline
        expr: up == 0
        for: 5m
      - record: job:a:rate5m
        expr: |
          sum by (job) (
            rate(a[5m])
          )
        labels:
          x: y
`), 0o644))
	rules, err := readRules(path)
	require.NoError(t, err)
	require.Len(t, rules, 2)
	require.Equal(t, "Inline", rules[0].Name)
	require.Equal(t, "up == 0", rules[0].Expr)
	require.Equal(t, "job:a:rate5m", rules[1].Name)
	require.Equal(t, "sum by (job) (\nrate(a[5m])\n)", rules[1].Expr)

	require.NoError(t, os.WriteFile(path, []byte("groups:\n  - name: g\n    rules:\n      - alert: NoExpr\n        for: 5m\n"), 0o644))
	_, err = readRules(path)
	require.ErrorContains(t, err, "rule NoExpr has no expr")
}

// grafanaVariable is a dashboard variable in a query: $name or ${name}.
var grafanaVariable = regexp.MustCompile(`\$\{?(\w+)\}?`)

// The dashboard's queries are PromQL that Prometheus accepts, once Grafana
// has put in its variables: promtool checks them as recording rules. The
// alert rules are checked and unit-tested by .ci/run with promtool.
func TestDeploy_DashboardQueriesParse(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus); .ci/run installs it")
	}
	type recording struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var recs []recording
	for _, q := range readDashboard(t).queries(t) {
		expr := grafanaVariable.ReplaceAllStringFunc(q, func(v string) string {
			switch strings.Trim(v, "${}") {
			case "__rate_interval", "__interval":
				return "5m"
			case "__range":
				return "6h"
			}
			return ".*" // a variable in a matcher
		})
		recs = append(recs, recording{Record: fmt.Sprintf("dashboard:query_%d", len(recs)), Expr: expr})
	}
	file := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}}
	b, err := json.Marshal(file) // JSON is YAML
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("SUCCESS: %d rules found", len(recs)))

	// And promtool does refuse a broken query.
	require.NoError(t, os.WriteFile(path, []byte(`{"groups":[{"name":"g","rules":[{"record":"a:b","expr":"sum(rate(x[5m])"}]}]}`), 0o644))
	out, err = exec.Command(promtool, "check", "rules", path).CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v: %s", err, out)
}

// driveSettle finalizes two jobs of courses through a settler of their own
// that records on mp: one settled at once (jobguard.settle.finalizes,
// settled), one whose update fails twice, so that its record waits for a
// sweep (pending), whose first attempt fails too (jobguard.settle.records,
// retrying for a failed reason) and a later one settles it (settled), and
// the sweeps' duration.
func driveSettle(t *testing.T, w *worker, mp metric.MeterProvider, courses [2]string) {
	t.Helper()
	ctx := context.Background()
	var calls atomic.Int32 // of the first job's update
	var first atomic.Value
	s, err := settle.New(ctx, settle.Config{
		Guard: w.guard, DB: w.pool, Grace: time.Nanosecond, BackoffMin: time.Nanosecond,
		Handlers: map[string]settle.Handler{"title": func(_ context.Context, exec jobguard.Execution, _ json.RawMessage) error {
			if exec.JobID == first.Load() && calls.Add(1) <= 2 {
				return errors.New("metadata store unreachable")
			}
			return nil
		}},
		Logger: slog.New(slog.DiscardHandler), MeterProvider: mp,
	})
	require.NoError(t, err)
	// The first finalize meets the failing update, the second settles.
	for i, course := range courses {
		jobID, err := flow.EnqueueChapter(ctx, w.pool, course, 9)
		require.NoError(t, err)
		exec, err := w.starts.Start(ctx, w.pool, jobID)
		require.NoError(t, err)
		if i == 0 {
			first.Store(exec.JobID)
		}
		res, err := s.Finalize(ctx, w.pool, exec, settle.Spec{Updates: []settle.Update{{Name: "title"}}})
		if i == 0 {
			require.ErrorIs(t, err, settle.ErrPending)
			continue
		}
		require.NoError(t, err)
		require.True(t, res.Settled)
	}
	var retried, settled int
	require.Eventually(t, func() bool {
		rep, err := s.Sweep(ctx)
		require.NoError(t, err)
		retried, settled = retried+rep.Retrying, settled+rep.Settled
		return settled == 1
	}, testenv.Patience, 20*time.Millisecond, "the sweeps settle the record left pending")
	require.Equal(t, 1, retried, "the first sweep's attempt failed")

	// The retention sweep removes the settled records (aged past a
	// microsecond), and records its rows and its duration.
	sw, err := retain.New(retain.Config{DB: w.pool, Tables: []retain.Table{{Rule: s.Retention(), Age: time.Microsecond}},
		Logger: slog.New(slog.DiscardHandler), MeterProvider: mp})
	require.NoError(t, err)
	var removed int64
	require.Eventually(t, func() bool {
		rep, err := sw.Sweep(ctx)
		require.NoError(t, err)
		removed += rep.Tables[0].Removed
		return removed == 2
	}, testenv.Patience, 20*time.Millisecond, "the retention sweep removes the two settled records")
}
