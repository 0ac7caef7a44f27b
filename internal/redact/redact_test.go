package redact_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/redact"
)

func TestString_MasksEveryPasswordAndKeepsTheRest(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                                  "",
		"cannot reach Redis at 127.0.0.1:1": "cannot reach Redis at 127.0.0.1:1",
		"password authentication failed for user \"postgres\"":                  "password authentication failed for user \"postgres\"",
		"WRONGPASS invalid username-password pair":                              "WRONGPASS invalid username-password pair",
		"http://127.0.0.1:9464/metrics":                                         "http://127.0.0.1:9464/metrics",
		"postgres://postgres@127.0.0.1:5432/test":                               "postgres://postgres@127.0.0.1:5432/test",
		"postgres://u:pw@h:5432/db?sslmode=disable":                             "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgresql://:pw@h/db":                                                 "postgresql://:xxxxx@h/db",
		"postgres://u:p%40w%2F@h/db":                                            "postgres://u:xxxxx@h/db",
		"postgres://u:p@w/:?# '\"@h/db":                                         "postgres://u:xxxxx@h/db",
		"redis://:pw@127.0.0.1:6379/0":                                          "redis://:xxxxx@127.0.0.1:6379/0",
		"redis://user:pw@h/0":                                                   "redis://user:xxxxx@h/0",
		"redis://pw@h:xx/0":                                                     "redis://xxxxx@h:xx/0",
		"rediss://:pw@h/0":                                                      "rediss://:xxxxx@h/0",
		"unix://:pw@/run/redis.sock":                                            "unix://:xxxxx@/run/redis.sock",
		`parse "redis://:pw@127.0.0.1:xx/0": invalid port ":xx" after host`:     `parse "redis://:xxxxx@127.0.0.1:xx/0": invalid port ":xx" after host`,
		`parse "redis://:p\"w@h:xx/0": invalid port`:                            `parse "redis://:xxxxx@h:xx/0": invalid port`,
		"a postgres://u:pw@h/db and a redis://:pw2@h2/0":                        "a postgres://u:xxxxx@h2/0",
		"host=h password=pw port=5432":                                          "host=h password=xxxxx port=5432",
		"host=h password = pw port=5432":                                        "host=h password = xxxxx port=5432",
		"host=h password='p w\\' x' port=5432":                                  "host=h password='xxxxx' port=5432",
		"host=h sslpassword=pw":                                                 "host=h sslpassword=xxxxx",
		"PGPASSWORD=pw psql":                                                    "PGPASSWORD=xxxxx psql",
		`{"password": "p\"w", "user": "u"}`:                                     `{"password": "xxxxx"}`,
		"postgres://h/db?password=pw&sslmode=bogus":                             "postgres://h/db?password=xxxxx",
		"Options{Addr:h:6379 Password:pw DB:0}":                                 "Options{Addr:h:6379 Password:xxxxx DB:0}",
		"cannot parse `host=h password=xxxxx port=xx`: invalid port":            "cannot parse `host=h password=xxxxx port=xx`: invalid port",
		"cannot parse `postgres://u:xxxxx@h:xx/db`: invalid port (parse \"x\")": "cannot parse `postgres://u:xxxxx@h:xx/db`: invalid port (parse \"x\")",
	} {
		got := redact.String(in)
		require.Equal(t, want, got, "in: %s", in)
		require.Equal(t, got, redact.String(got), "String is idempotent: %s", in)
	}
}

// fragment finds a piece of a generated password: each is made of "Zq"
// and two digits between runs of other bytes, so a fragment survives any
// quoting and escaping.
var fragment = regexp.MustCompile(`Zq[0-9]{2}`)

// password returns a password of fragments and the bytes in between,
// drawn from alphabet.
func password(r *rand.Rand, alphabet string) string {
	var b strings.Builder
	for range 1 + r.IntN(4) {
		fmt.Fprintf(&b, "Zq%02d", r.IntN(100))
		for range r.IntN(4) {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
	}
	return b.String()
}

// renderings are the forms in which a connection string reaches output:
// whole (as is, quoted by Go and by JSON, wrapped), and in the errors of the
// parsers that read it (net/url, pgx, go-redis), which may print only
// pieces of it.
func renderings(s string) (whole, parsed []string) {
	js, _ := json.Marshal(s)
	whole = []string{s, fmt.Sprintf("%q", s), string(js), fmt.Sprintf("--database-url %s: refused", s)}
	if _, err := url.Parse(s); err != nil {
		parsed = append(parsed, err.Error(), fmt.Errorf("--redis-url: %w", err).Error())
	}
	if _, err := pgxpool.ParseConfig(s); err != nil {
		parsed = append(parsed, err.Error())
	}
	if _, err := redis.ParseURL(s); err != nil {
		parsed = append(parsed, err.Error())
	}
	return whole, parsed
}

// Whatever bytes a password holds, unescaped in a URL's userinfo or in a
// quoted keyword/value string: no fragment of it survives String in a text
// that holds the whole connection string, nor a Redactor made from it in
// whatever a parser that failed on it says.
func TestRedactor_NoGeneratedPasswordSurvivesAnyRendering(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(19, 5))
	const anything = "abcXYZ019@/:?#[]% \"'`\\&=;,{}()!$*+~^|<>\t\n\r\x00é"
	const unquoted = "abcXYZ019@/:?#[]%&;,{}()!$*+~^|<>é" // a keyword/value password ends at a space and opens no quote
	templates := []struct {
		name, alphabet string
		build          func(pw string) string
	}{
		{"postgres url", anything, func(pw string) string { return "postgres://postgres:" + pw + "@127.0.0.1:5432/test" }},
		{"postgres url, bad port", anything, func(pw string) string { return "postgres://u:" + pw + "@127.0.0.1:xx/test" }},
		{"postgresql url, no user", anything, func(pw string) string { return "postgresql://:" + pw + "@h/db?sslmode=bogus" }},
		{"postgres url, encoded", anything, func(pw string) string { return "postgres://u:" + url.PathEscape(pw) + "@h:1/db" }},
		{"postgres url, query", unquoted, func(pw string) string { return "postgres://h/db?password=" + pw + "&sslmode=bogus" }},
		{"keyword/value", unquoted, func(pw string) string { return "host=h port=xx password=" + pw + " dbname=test" }},
		{"keyword/value, last", unquoted, func(pw string) string { return "host=h port=xx password=" + pw }},
		{"keyword/value, quoted", anything, func(pw string) string {
			return "host=h password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "' port=xx"
		}},
		{"sslpassword", unquoted, func(pw string) string { return "host=h sslpassword=" + pw + " sslmode=bogus" }},
		{"redis url", anything, func(pw string) string { return "redis://:" + pw + "@127.0.0.1:6379/0" }},
		{"redis url, user, bad port", anything, func(pw string) string { return "redis://u:" + pw + "@127.0.0.1:xx/0" }},
		{"redis url, bare", unquoted, func(pw string) string { return "redis://" + strings.ReplaceAll(pw, ":", "") + "@h:xx/0" }},
		{"rediss url, encoded", anything, func(pw string) string { return "rediss://:" + url.QueryEscape(pw) + "@h/x" }},
		{"unix url", anything, func(pw string) string { return "unix://:" + pw + "@/run/redis.sock" }},
	}
	for _, tc := range templates {
		for range 300 {
			s := tc.build(password(r, tc.alphabet))
			known := redact.New(s)
			whole, parsed := renderings(s)
			for _, text := range whole {
				if got := redact.String(text); fragment.MatchString(got) {
					t.Fatalf("%s: %q\nrendered %q\nredacted %q", tc.name, s, text, got)
				}
			}
			for _, text := range append(whole, parsed...) {
				if got := known.String(text); fragment.MatchString(got) {
					t.Fatalf("%s: %q\nrendered %q\nredacted, knowing it, %q", tc.name, s, text, got)
				}
			}
		}
	}
}

func TestError_RedactsTheMessageAndKeepsTheChain(t *testing.T) {
	t.Parallel()
	require.NoError(t, redact.Error(nil))
	_, perr := url.Parse("redis://:pw@h:xx/0")
	err := redact.Error(fmt.Errorf("--redis-url: %w", perr))
	require.Equal(t, `--redis-url: parse "redis://:xxxxx@h:xx/0": invalid port ":xx" after host`, err.Error())
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	require.Equal(t, "redis://:pw@h:xx/0", ue.URL, "the chain is the original")
}

// Logs through Handler hold no password, in text and in JSON, in the
// message, an attribute (string, error, Stringer), a group and the
// logger's own attributes; JSON lines stay JSON.
func TestHandler_LogsHoldNoPassword(t *testing.T) {
	t.Parallel()
	secret := "redis://:Zq01\"}@h:xx/0"
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		var h slog.Handler = slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
		if format == "json" {
			h = slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
		}
		log := slog.New(redact.Handler(h)).With(slog.String("url", secret)).WithGroup("g")
		_, perr := url.Parse(secret)
		log.Debug("connect "+secret, slog.Any("error", fmt.Errorf("wrapped: %w", perr)), slog.String("s", secret),
			slog.Any("stringer", stringer(secret)), slog.Group("inner", slog.String("dsn", "host=h password=Zq02")),
			slog.Int("n", 3))
		require.NotRegexp(t, fragment, buf.String(), format)
		require.Contains(t, buf.String(), "xxxxx")
		if format == "json" {
			var line map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &line), buf.String())
			require.Equal(t, 3.0, line["g"].(map[string]any)["n"])
		}
	}
}

type stringer string

func (s stringer) String() string { return string(s) }
