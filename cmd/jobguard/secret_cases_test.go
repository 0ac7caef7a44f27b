package main

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// A worker that could not reach the database fails its job with an error
// that quotes the URL it was given: the same URL, password and all, that
// the operator gives the command. Explain masks it in the failure reason it
// prints; retry, which prints the reason it cleared, must too, in text and
// in JSON.
func TestSecrets_RetryPrintsTheClearedReasonRedacted(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	server, err := url.Parse(b.env.DatabaseURL)
	require.NoError(t, err)
	// The server trusts every connection: the command works with it.
	dbURL := "postgres://postgres:Zq81Pw@127.0.0.1:" + server.Port() + "/test"
	reason := "load course: connect " + dbURL + ": dial tcp: i/o timeout"
	for _, args := range [][]string{{}, {"--json"}} {
		id := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Reason: reason, Generation: 3, UpdatedAgo: time.Hour})
		servers := []string{"--database-url", dbURL, "--redis-url", b.env.RedisURL, "--markers", "redis"}
		base := append(append(tableArgs(b.jobs.Table), "--schema", b.env.Schema, "--prefix", b.env.Prefix), servers...)

		ex := jg(t, append(append([]string{"explain"}, base...), append(args, id)...)...)
		require.Contains(t, ex.stdout, "load course: connect", ex)
		require.NotRegexp(t, leaked, ex.stdout+ex.stderr, "explain masks it")

		r := jg(t, append(append([]string{"retry"}, base...), append(args, id)...)...)
		require.Equal(t, exitOK, r.code, r)
		require.Contains(t, r.stdout, "load course: connect", r)
		require.NotRegexp(t, leaked, r.stdout+r.stderr, "retry %v", args)
	}
}

// A password may hold a character beyond ASCII that Go does not print as
// it is (a no-break space, a zero-width space, a soft hyphen: pasted from a
// document or a password manager) besides a '#'. url.Parse then fails on
// the text before the '#', and its error quotes that text with %q, which
// writes such a character as an escape (\u00a0): no command prints what
// is left of the password around it, from the flag or the environment.
func TestSecrets_NoCommandPrintsAPasswordWithAnUnprintableCharacter(t *testing.T) {
	t.Parallel()
	lc := setupLeakCheck(t)
	for name, u := range map[string]string{
		"no-break-space":   "redis://:Zq61Pw\u00a0Zq61Px#Zq61Py@127.0.0.1:6379/0",
		"zero-width-space": "rediss://jobguard:Zq62Pw\u200bZq62Px#Zq62Py@127.0.0.1:6379/0",
		"soft-hyphen-unix": "unix://:Zq63Pw\u00adZq63Px#Zq63Py@/nonexistent/redis.sock",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lc := &leakCheck{t: t, b: lc.b, id: lc.id}
			requireNoLeak(t, lc.runAll(nil, "--database-url", lc.b.env.DatabaseURL, "--redis-url", u))
			requireNoLeak(t, lc.runAll([]string{envRedisURL + "=" + u, envDatabaseURL + "=" + lc.b.env.DatabaseURL}))
		})
	}
}

// A keyword/value string whose password holds a space left unquoted (the
// operator forgot the quotes libpq wants: password=two words) does not
// parse, and pgx's error quotes the string with only the first word
// masked, or names the second as a keyword without '='. No command prints
// any word of the password, from the flag or the environment.
func TestSecrets_NoCommandPrintsAnUnquotedKeywordValuePasswordWithASpace(t *testing.T) {
	t.Parallel()
	lc := setupLeakCheck(t)
	server, err := url.Parse(lc.b.env.DatabaseURL)
	require.NoError(t, err)
	port := server.Port()
	for name, dsn := range map[string]string{
		"last":   "host=127.0.0.1 port=" + port + " dbname=test user=postgres password=Zq91Pw Zq91Px",
		"middle": "host=127.0.0.1 password=Zq92Pw Zq92Px port=" + port + " dbname=test user=postgres",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lc := &leakCheck{t: t, b: lc.b, id: lc.id}
			requireNoLeak(t, lc.runAll(nil, "--redis-url", lc.b.env.RedisURL, "--database-url", dsn))
			requireNoLeak(t, lc.runAll([]string{envDatabaseURL + "=" + dsn, envRedisURL + "=" + lc.b.env.RedisURL}))
		})
	}
}

// libpq and pgx take any ASCII white space around a keyword's '=', a
// newline included (a connection string written over several lines); a
// string that then fails to parse is quoted in pgx's error, whose own
// masking looks for "password=" only. No command prints its password.
func TestSecrets_NoCommandPrintsAKeywordValuePasswordAfterANewline(t *testing.T) {
	t.Parallel()
	lc := setupLeakCheck(t)
	for name, dsn := range map[string]string{
		"newline-after-equals":  "host=127.0.0.1 port=xx dbname=test user=postgres password =\nZq93Pw",
		"newline-before-equals": "host=127.0.0.1\nport=xx\ndbname=test\nuser=postgres\npassword\n=Zq94Pw",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lc := &leakCheck{t: t, b: lc.b, id: lc.id}
			requireNoLeak(t, lc.runAll(nil, "--redis-url", lc.b.env.RedisURL, "--database-url", dsn))
			requireNoLeak(t, lc.runAll([]string{envDatabaseURL + "=" + dsn, envRedisURL + "=" + lc.b.env.RedisURL}))
		})
	}
}
