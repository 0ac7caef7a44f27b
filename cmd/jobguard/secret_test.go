package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// Every password below is made of fragments "Zq" and two digits, around
// and between the characters a URL must escape: a fragment survives any
// quoting, escaping or percent-encoding, so one found anywhere in what the
// command printed is a password that leaked.
var leaked = regexp.MustCompile(`Zq[0-9]{2}`)

// specials are the characters that break a URL's syntax when a password
// holds them unescaped.
const specials = "@/:?# \"'`\\%&="

// secretURL is a server URL holding a password.
type secretURL struct {
	name string
	url  string
	// broken: the URL does not parse, so every command that reads it
	// refuses it; false when it parses and the server answers or not.
	broken bool
}

// databaseURLs are PostgreSQL URLs and keyword/value strings with a
// password, well-formed (the server trusts every connection, so the
// command works with them) and not. {port} is the server's.
func databaseURLs(port string) []secretURL {
	return []secretURL{
		{name: "url", url: "postgres://postgres:Zq01Pw@127.0.0.1:" + port + "/test"},
		{name: "url-refused", url: "postgres://postgres:Zq02Pw@127.0.0.1:1/test"},
		{name: "url-bad-port", url: "postgres://postgres:Zq03Pw@127.0.0.1:xx/test", broken: true},
		{name: "url-no-user-bad-port", url: "postgresql://:Zq04Pw@127.0.0.1:99999/test", broken: true},
		{name: "url-raw-specials", url: "postgres://postgres:Zq05Pw" + specials + "Zq05Px@127.0.0.1:" + port + "/test", broken: true},
		{name: "url-encoded-bad-option", url: "postgres://postgres:Zq06Pw%2F%40%3AZq06Px@127.0.0.1:" + port + "/test?sslmode=bogus", broken: true},
		{name: "url-query-password", url: "postgres://postgres@127.0.0.1:" + port + "/test?password=Zq07Pw&sslmode=bogus", broken: true},
		{name: "url-broken-host", url: "postgres://postgres:Zq08Pw@[::1/test", broken: true},
		{name: "keyword-value", url: "host=127.0.0.1 port=" + port + " dbname=test user=postgres password=Zq09Pw"},
		{name: "keyword-value-bad-port", url: "host=127.0.0.1 port=xx dbname=test password=Zq10Pw", broken: true},
		{name: "keyword-value-quoted", url: "host=127.0.0.1 port=xx password='Zq11Pw " + `\'` + "Zq11Px'", broken: true},
		{name: "keyword-value-sslpassword", url: "host=127.0.0.1 port=" + port + " sslpassword=Zq12Pw sslmode=bogus", broken: true},
		{name: "redis-url-given", url: "redis://:Zq13Pw@127.0.0.1:6379/0", broken: true},
	}
}

// redisURLs are Redis URLs with a password, all of which fail: the server
// has none, so a well-formed one is refused at its AUTH.
func redisURLs(addr string) []secretURL {
	return []secretURL{
		{name: "url", url: "redis://:Zq21Pw@" + addr + "/0"},
		{name: "url-user", url: "redis://jobguard:Zq22Pw@" + addr + "/0"},
		{name: "url-refused", url: "redis://:Zq23Pw@127.0.0.1:1/0"},
		{name: "url-bad-port", url: "redis://:Zq24Pw@127.0.0.1:xx/0", broken: true},
		{name: "url-user-bad-port", url: "redis://jobguard:Zq25Pw@127.0.0.1:xx/0", broken: true},
		{name: "url-raw-specials", url: "redis://:Zq26Pw" + specials + "Zq26Px@" + addr + "/0", broken: true},
		{name: "url-encoded-bad-db", url: "redis://:Zq27Pw%2F%40Zq27Px@" + addr + "/x", broken: true},
		{name: "url-bad-option", url: "redis://:Zq28Pw@" + addr + "/0?bogus=1", broken: true},
		{name: "url-bare-password", url: "redis://Zq29Pw@127.0.0.1:xx/0", broken: true},
		{name: "tls-bad-port", url: "rediss://:Zq30Pw@127.0.0.1:xx/0", broken: true},
		{name: "unix", url: "unix://:Zq31Pw@/nonexistent/redis.sock"},
		{name: "postgres-url-given", url: "postgres://postgres:Zq32Pw@127.0.0.1/test", broken: true},
	}
}

// secretRun is what one run printed, for the leak search and for the
// failure message.
type secretRun struct {
	args   []string
	output string // stdout, stderr and, for run, a /metrics scrape
	code   int
}

// leakCheck runs every command the way tests of secrets want it run, and
// collects what each printed.
type leakCheck struct {
	t  *testing.T
	b  *bundle
	id string
}

// commandLines are every command, with the flags that make it print the
// most: --json, debug logs in text and in JSON, each source of active jobs.
func (lc *leakCheck) commandLines() [][]string {
	id := lc.id
	return [][]string{
		{"explain", id},
		{"explain", "--json", "--source", "bullmq", "--bullmq-queue", "q", id},
		{"sweep", "--log-level", "debug", "--notices", "redis"},
		{"sweep", "--dry-run", "--json", "--log-format", "json", "--log-level", "debug", "--source", "bullmq", "--bullmq-queue", "q"},
		{"sweep", "--log-format", "json", "--log-level", "debug", "--notices", "postgres"},
		{"limits", "list"},
		{"limits", "list", "--json"},
		{"limits", "set", "chapter", "30m"},
		{"limits", "suggest", "--json"},
		{"retry", id},
		{"retry", "--json", id},
		{"version"},
		{"explain", "--help"},
		{"run", "--log-level", "debug"},
		{"run", "--log-format", "json", "--log-level", "debug", "--shadow"},
	}
}

// base are the flags that map the bundle's table and its schema, without
// the servers.
func (lc *leakCheck) base() []string {
	b := lc.b
	// The markers in Redis, so that every command reads the Redis URL too.
	return append(tableArgs(b.jobs.Table), "--schema", b.env.Schema, "--prefix", b.env.Prefix,
		"--notice-channel", b.env.Schema, "--markers", "redis")
}

// runAll runs every command line with extra flags and env, and returns
// what each printed.
func (lc *leakCheck) runAll(env []string, extra ...string) []secretRun {
	var runs []secretRun
	for _, line := range lc.commandLines() {
		n := 1
		if line[0] == "limits" {
			n = 2
		}
		args := append(append(append(append([]string{}, line[:n]...), lc.base()...), extra...), line[n:]...)
		if line[0] == "version" {
			args = append([]string{"version"}, extra...)
		}
		if line[0] == "run" {
			runs = append(runs, lc.service(env, args))
			continue
		}
		r := jgEnv(lc.t, env, args...)
		runs = append(runs, secretRun{args: args, output: r.stdout + r.stderr, code: r.code})
	}
	return runs
}

// service runs 'jobguard run' with args: when it starts, its /metrics is
// scraped and it is stopped with SIGTERM; when it cannot, it exits by
// itself.
func (lc *leakCheck) service(env, args []string) secretRun {
	t := lc.t
	args = append(args, "--interval", "100ms", "--metrics-addr", "127.0.0.1:0", "--leader-key", fmt.Sprint(rand.Int64N(1<<62)+1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := newCmd(ctx, env, args...)
	var out testenv.Logs
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	served := regexp.MustCompile(`(http://127\.0\.0\.1:[0-9]+/metrics)`)
	var scrape string
	for {
		select {
		case <-done:
			return secretRun{args: args, output: out.String() + scrape, code: cmd.ProcessState.ExitCode()}
		case <-time.After(20 * time.Millisecond):
		}
		if scrape != "" || !strings.Contains(out.String(), "jobguard: run: started") {
			continue
		}
		m := served.FindStringSubmatch(out.String())
		require.NotNil(t, m, "the service started without serving /metrics:\n%s", out.String())
		// A sweep or two, so that the metrics have values.
		require.Eventually(t, func() bool { return strings.Count(out.String(), "reclaim: sweep") >= 2 },
			30*time.Second, 20*time.Millisecond, out.String())
		scrape = "\n/metrics:\n" + get(t, m[1])
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	}
}

func get(t *testing.T, address string) string {
	t.Helper()
	resp, err := http.Get(address)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// requireNoLeak fails for every run whose output holds a fragment of a
// password.
func requireNoLeak(t *testing.T, runs []secretRun) {
	t.Helper()
	for _, r := range runs {
		if loc := leaked.FindStringIndex(r.output); loc != nil {
			t.Errorf("jobguard %s\nexit %d; printed a password (%q):\n%s", strings.Join(r.args, " "), r.code,
				r.output[loc[0]:loc[1]], r.output)
		}
	}
}

func setupLeakCheck(t *testing.T) *leakCheck {
	t.Helper()
	b := setup(t, fixture.Default)
	id := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Reason: "reclaimed: exceeded runtime limit without progress",
		Generation: 3, UpdatedAgo: time.Hour})
	return &leakCheck{t: t, b: b, id: id}
}

// requireServed checks that the service ran and its /metrics was
// scraped, in at least want runs, so that the search covered them.
func requireServed(t *testing.T, runs []secretRun, want int) {
	t.Helper()
	n := 0
	for _, r := range runs {
		if strings.Contains(r.output, "\n/metrics:\n") {
			n++
		}
	}
	require.GreaterOrEqual(t, n, want, "services that ran and were scraped")
}

// requireSourceNamed checks that every run that refused or could not use
// the URL names where the URL came from, and not where it did not.
func requireSourceNamed(t *testing.T, runs []secretRun, used, unused string) {
	t.Helper()
	for _, r := range runs {
		// Done, not found and refused say nothing of the servers.
		if r.code == exitOK || r.code == exitNotFound || r.code == exitRefused || r.args[0] == "version" {
			continue
		}
		if !strings.Contains(r.output, used) || strings.Contains(r.output, unused) {
			t.Errorf("jobguard %s\nexit %d; names %s %v, %s %v:\n%s", strings.Join(r.args, " "), r.code,
				used, strings.Contains(r.output, used), unused, strings.Contains(r.output, unused), r.output)
		}
	}
}

// No command prints a password of the PostgreSQL URL, well-formed or not,
// from the flag or from the environment, in any output: its result (text
// and JSON), its errors and what to do about them, its logs (text and
// JSON), its help, the service's /metrics. An error names where the URL
// came from.
func TestSecrets_NoCommandPrintsTheDatabasePassword(t *testing.T) {
	t.Parallel()
	lc := setupLeakCheck(t)
	server, err := url.Parse(lc.b.env.DatabaseURL)
	require.NoError(t, err)
	for _, u := range databaseURLs(server.Port()) {
		t.Run(u.name, func(t *testing.T) {
			t.Parallel()
			lc := &leakCheck{t: t, b: lc.b, id: lc.id}
			fromFlag := lc.runAll(nil, "--redis-url", lc.b.env.RedisURL, "--database-url", u.url)
			requireNoLeak(t, fromFlag)
			fromEnv := lc.runAll([]string{envDatabaseURL + "=" + u.url, envRedisURL + "=" + lc.b.env.RedisURL})
			requireNoLeak(t, fromEnv)
			if u.broken {
				requireSourceNamed(t, fromFlag, "--database-url", envDatabaseURL)
				requireSourceNamed(t, fromEnv, envDatabaseURL, "--database-url")
			}
			if served := !u.broken && u.name != "url-refused"; served {
				requireServed(t, fromFlag, 2) // run, and run --shadow
				requireServed(t, fromEnv, 2)
			}
		})
	}
}

// No command prints a password of the Redis URL, well-formed or not, from
// the flag or from the environment, in any output. An error names where
// the URL came from.
func TestSecrets_NoCommandPrintsTheRedisPassword(t *testing.T) {
	t.Parallel()
	lc := setupLeakCheck(t)
	server, err := url.Parse(lc.b.env.RedisURL)
	require.NoError(t, err)
	for _, u := range redisURLs(server.Host) {
		t.Run(u.name, func(t *testing.T) {
			t.Parallel()
			lc := &leakCheck{t: t, b: lc.b, id: lc.id}
			fromFlag := lc.runAll(nil, "--database-url", lc.b.env.DatabaseURL, "--redis-url", u.url)
			requireNoLeak(t, fromFlag)
			fromEnv := lc.runAll([]string{envRedisURL + "=" + u.url, envDatabaseURL + "=" + lc.b.env.DatabaseURL})
			requireNoLeak(t, fromEnv)
			requireSourceNamed(t, fromFlag, "--redis-url", envRedisURL)
			requireSourceNamed(t, fromEnv, envRedisURL, "--redis-url")
			if !u.broken {
				// run --shadow, which does not need Redis; run too where
				// the server lets any password in.
				requireServed(t, fromFlag, 1)
				requireServed(t, fromEnv, 1)
			}
		})
	}
}

// The servers' URLs do not belong in the config file, but a password put
// there by mistake (as a field the file does not have, as the value of one
// it has, or a URL given as the file's path) reaches no output either; an
// error names the file and where its path came from.
func TestSecrets_NoCommandPrintsAPasswordGivenInTheConfigFile(t *testing.T) {
	t.Parallel()
	lc := setupLeakCheck(t)
	pw := "postgres://postgres:Zq41Pw" + specials + "Zq41Px@127.0.0.1:5432/test"
	files := map[string]string{
		"unknown-field":  fmt.Sprintf(`{"database_url": %q, "redis_url": %q}`, pw, "redis://:Zq42Pw@127.0.0.1:6379/0"),
		"duration-field": fmt.Sprintf(`{"reclaim": {"interval": %q}}`, "redis://:Zq43Pw@127.0.0.1:xx/0"),
		"table-name":     fmt.Sprintf(`{"table": {"name": %q}}`, "postgres://u:Zq44Pw@h/db"),
		"not-json":       "database_url=postgres://postgres:Zq45Pw@127.0.0.1:5432/test\n",
	}
	for name, content := range files {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lc := &leakCheck{t: t, b: lc.b, id: lc.id}
			path := writeConfig(t, content)
			servers := []string{"--database-url", lc.b.env.DatabaseURL, "--redis-url", lc.b.env.RedisURL}
			fromFlag := lc.runAll(nil, append(servers, "--config", path)...)
			requireNoLeak(t, fromFlag)
			fromEnv := lc.runAll([]string{envConfig + "=" + path}, servers...)
			requireNoLeak(t, fromEnv)
			if name != "table-name" {
				requireSourceNamed(t, fromFlag, "--config", envConfig)
				requireSourceNamed(t, fromEnv, envConfig, "--config")
			}
		})
	}
	t.Run("path", func(t *testing.T) {
		t.Parallel()
		lc := &leakCheck{t: t, b: lc.b, id: lc.id}
		servers := []string{"--database-url", lc.b.env.DatabaseURL, "--redis-url", lc.b.env.RedisURL}
		requireNoLeak(t, lc.runAll(nil, append(servers, "--config", pw)...))
		requireNoLeak(t, lc.runAll([]string{envConfig + "=" + pw}, servers...))
	})
}

// A command that panics, with a value that holds a URL, ends with exit 1
// and the panic's message and stack on stderr, redacted as every error is.
func TestSecrets_APanicIsReportedRedacted(t *testing.T) {
	t.Parallel()
	url := "redis://:Zq51Pw#Zq51Px@127.0.0.1:6379/0"
	var stderr strings.Builder
	// The redactor main makes of the command line that gave the URL.
	c := &cli{stdout: io.Discard, stderr: &stderr, red: redact.New("--redis-url", url)}
	boom := &command{name: "boom", run: func(context.Context, *cli, *settings, []string) error {
		_, err := redis.ParseURL(url)
		panic(err)
	}}
	s := defaultSettings()
	code := c.report(boom, c.run(context.Background(), boom, &s, nil))
	require.Equal(t, exitError, code)
	require.Contains(t, stderr.String(), "jobguard boom: panic: parse ")
	require.Contains(t, stderr.String(), "secret_test.go", "the stack")
	require.NotRegexp(t, leaked, stderr.String())
}
