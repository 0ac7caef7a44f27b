package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// errorJSON is what --json prints on stderr for an error.
type errorJSON struct {
	Command string `json:"command"`
	Error   string `json:"error"`
	Hint    string `json:"hint"`
	Code    int    `json:"code"`
}

// oneErrorObject parses r's stderr as exactly one JSON object, on one
// line, with the exit code in it.
func oneErrorObject(t *testing.T, r result) errorJSON {
	t.Helper()
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %s", r)
	dec := json.NewDecoder(strings.NewReader(r.stderr))
	dec.DisallowUnknownFields()
	var e errorJSON
	require.NoError(t, dec.Decode(&e), "stderr is one JSON object: %s", r)
	require.False(t, dec.More(), "nothing after the object: %s", r)
	require.Equal(t, r.code, e.Code, "the object's code is the exit code: %s", r)
	require.NotEmpty(t, e.Error, r)
	return e
}

// With --json, every error is one JSON object on stderr, whatever failed
// and however early: a mistyped command or flag, a bad config file, a
// server that does not answer (its password masked), a refused operation.
// The exit code is the one the text output ends with.
func TestJSONErrors_EveryErrorIsOneObjectOnStderr(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	running := b.jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})

	for _, tc := range []struct {
		name string
		r    result
		code int
		says string
	}{
		{"unknown command", jg(t, "explode", "--json"), 2, `unknown command "explode"`},
		{"unknown flag", jg(t, "explain", "--json", "--no-such-flag", "x"), 2, "flag provided but not defined: -no-such-flag"},
		{"flag after the bad one", jg(t, "explain", "--no-such-flag", "x", "--json"), 2, "flag provided but not defined"},
		{"missing argument", jg(t, "explain", "--json"), 2, "explain takes one job id"},
		{"config file", jg(t, "explain", "--json", "--config", "/no/such/file.json", "x"), 2, "--config: open /no/such/file.json"},
		{"config file mistake", jg(t, "sweep", "--json", "--config", writeConfig(t, `{"table": {"nme": "jobs"}}`)), 2, `unknown field "nme"`},
		{"database", jg(t, "limits", "list", "--json", "--database-url", "postgres://postgres:Zq61Pw@"+closedPort+"/test"),
			1, "cannot reach PostgreSQL at 127.0.0.1:1"},
		{"refused", b.run(t, "retry", running, "--json"), 4, "only a FAILED job can be retried"},
		{"not found", b.run(t, "retry", "00000000-0000-0000-0000-000000000001", "--json"), 3, "not found"},
	} {
		require.Equal(t, tc.code, tc.r.code, "%s: %s", tc.name, tc.r)
		e := oneErrorObject(t, tc.r)
		require.Contains(t, e.Error, tc.says, tc.name)
		require.NotContains(t, tc.r.stderr, "Zq61", "%s: no password in the error", tc.name)
	}

	e := oneErrorObject(t, jg(t, "limits", "list", "--json", "--database-url", "postgres://postgres:Zq62Pw@"+closedPort+"/test"))
	require.Equal(t, "jobguard limits list", e.Command)
	require.Contains(t, e.Hint, "check that the server is up and that --database-url names it")

	// --json=false, or none, keeps the text.
	r := jg(t, "explode", "--json=false")
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, `jobguard: unknown command "explode"`)
	require.False(t, json.Valid([]byte(r.stderr)), r)
}
