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
		servers := []string{"--database-url", dbURL, "--redis-url", b.env.RedisURL}
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
