package flow

import (
	"bytes"
	"context"
	"flag"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// leaked finds a fragment of the passwords below: each is made of "Zq" and
// two digits around the characters a URL must escape, so a fragment
// survives any quoting or escaping.
var leaked = regexp.MustCompile(`Zq[0-9]{2}`)

// Connect's errors name what failed without the password of either URL,
// well-formed or not.
func TestConnect_ErrorsHoldNoPassword(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	for _, cfg := range []Config{
		{DatabaseURL: "postgres://postgres:Zq01Pw@127.0.0.1:xx/test", RedisURL: env.RedisURL},
		{DatabaseURL: "postgres://postgres:Zq02Pw@/:? \"Zq02Px@127.0.0.1:5432/test", RedisURL: env.RedisURL},
		{DatabaseURL: "postgres://postgres:Zq03Pw@127.0.0.1:1/test", RedisURL: env.RedisURL},
		{DatabaseURL: env.DatabaseURL, RedisURL: "redis://:Zq04Pw@127.0.0.1:xx/0"},
		{DatabaseURL: env.DatabaseURL, RedisURL: "redis://:Zq05Pw@/:? \"Zq05Px@127.0.0.1:6379/0"},
		{DatabaseURL: env.DatabaseURL, RedisURL: "redis://u:Zq06Pw@127.0.0.1:6379/x"},
		{DatabaseURL: env.DatabaseURL, RedisURL: "redis://:Zq07Pw@127.0.0.1:1/0"},
	} {
		cfg.Schema, cfg.Prefix = env.Schema, env.Prefix
		conns, err := Connect(context.Background(), cfg)
		if err == nil {
			conns.Close()
		}
		require.Error(t, err)
		require.NotRegexp(t, leaked, err.Error())
	}
}

// The connection flags' help shows no password of the URLs in the
// environment. Not parallel: it sets the environment.
func TestFlags_HelpShowsNoPasswordFromTheEnvironment(t *testing.T) {
	t.Setenv("JOBGUARD_DATABASE_URL", "postgres://postgres:Zq11Pw@127.0.0.1:5432/test")
	t.Setenv("JOBGUARD_REDIS_URL", "redis://:Zq12Pw@127.0.0.1:6379/0")
	var cfg Config
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	cfg.Flags(fs)
	require.Error(t, fs.Parse([]string{"-no-such-flag"}))
	require.Contains(t, out.String(), "-database")
	require.NotRegexp(t, leaked, out.String())
	require.NoError(t, fs.Parse(nil))
	require.Equal(t, "postgres://postgres:Zq11Pw@127.0.0.1:5432/test", cfg.DatabaseURL, "the environment is still the default")
	require.Equal(t, "redis://:Zq12Pw@127.0.0.1:6379/0", cfg.RedisURL)
}

// A password with a character Go escapes when it quotes (a no-break space)
// and a '#': url.Parse's error quotes what comes before the '#' with the
// character escaped, and what is left of the password around it must not
// reach Connect's error.
func TestConnect_ErrorsHoldNoPasswordWithAnUnprintableCharacter(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	cfg := Config{DatabaseURL: env.DatabaseURL, RedisURL: "redis://:Zq08Pw\u00a0Zq08Px#Zq08Py@127.0.0.1:6379/0",
		Schema: env.Schema, Prefix: env.Prefix}
	conns, err := Connect(context.Background(), cfg)
	if err == nil {
		conns.Close()
	}
	require.Error(t, err)
	require.NotRegexp(t, leaked, err.Error())
}
