package redact_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

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
		"PGPASSWORD=pw psql":                                                    "PGPASSWORD=xxxxx",
		"host=h password=a b port=5432":                                         "host=h password=xxxxx port=5432",
		"host=h port=5432 password=a b":                                         "host=h port=5432 password=xxxxx",
		"host=h password=a b \t\n":                                              "host=h password=xxxxx \t\n",
		"host=h password=a\\ port=1 b":                                          "host=h password=xxxxx",
		"host=h password =\npw port=5432":                                       "host=h password =\nxxxxx port=5432",
		"host=h\npassword\n=pw\nport=5432":                                      "host=h\npassword\n=xxxxx\nport=5432",
		"host=h\rpassword\v=\fpw\vport=5432":                                    "host=h\rpassword\v=\fxxxxx\vport=5432",
		"cannot parse `host=h port=xx password=xxxxx b`: invalid port":          "cannot parse `host=h port=xx password=xxxxx`: invalid port",
		`connect "host=h\npassword\v=\u000bpw\nport=xx": refused`:               `connect "host=h\npassword\v=\u000bxxxxx\nport=xx": refused`,
		`connect "host=h password=a b": refused`:                                `connect "host=h password=xxxxx": refused`,
		"Options{Addr:h:6379 Password:a b DB:0}":                                "Options{Addr:h:6379 Password:xxxxx DB:0}",
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
// and two digits between runs of other characters, so a fragment survives
// any quoting and escaping.
var fragment = regexp.MustCompile(`Zq[0-9]{2}`)

// units splits an alphabet into its characters, a byte that is not UTF-8
// as one of its own.
func units(alphabet string) []string {
	var out []string
	for alphabet != "" {
		_, n := utf8.DecodeRuneInString(alphabet)
		out, alphabet = append(out, alphabet[:n]), alphabet[n:]
	}
	return out
}

// password returns a password of fragments and the characters in between,
// drawn from alphabet.
func password(r *rand.Rand, alphabet []string) string {
	var b strings.Builder
	for range 1 + r.IntN(4) {
		fmt.Fprintf(&b, "Zq%02d", r.IntN(100))
		for range r.IntN(4) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
	}
	return b.String()
}

var (
	// escaped are characters some printer writes as an escape: Go's %q
	// (a no-break space, a zero-width space, a soft hyphen, line and
	// paragraph separators, a byte-order mark, control bytes, a byte that
	// is not UTF-8), %+q and percent-encoding (anything beyond ASCII).
	escaped = "\u00a0\u200b\u00ad\u2028\u2029\ufeff\x7f\x1b\xffé日"
	// anything may stand in a URL's userinfo, unescaped, or in a quoted
	// keyword/value string.
	anything = units("abcXYZ019@/:?#[]% \"'`\\&=;,{}()!$*+~^|<>\t\n\r\x00" + escaped)
	// unquoted may stand in an unquoted value: it opens no quote and holds
	// no '=' and no backslash.
	unquoted = units("abcXYZ019@/:?#[]%&;,{}()!$*+~^|<>" + escaped)
	// bare may stand alone in a Redis URL's userinfo: it holds no ':'.
	bare = units("abcXYZ019@/?#[]%&;,{}()!$*+~^|<>" + escaped)
	// spaced is unquoted with libpq's white space: a password whose space
	// was left unquoted.
	spaced = units("abcXYZ019@/:?#[]%&;,{}()!$*+~^|<> \t\n\r\v\f" + escaped)
	// libpqSpace is white space libpq takes around a keyword's '='.
	libpqSpace = []string{"", " ", "\n", "\t \r", "\v", "\f\n "}
)

// renderings are the forms in which a connection string s with password
// pw reaches output. whole say that they hold a connection string: s as
// is, quoted by Go and by JSON, parsed and printed again, wrapped. partial
// do not: the errors of the parsers that read s (net/url, pgx, go-redis),
// which may print only pieces of it, and pw alone as printers escape it.
func renderings(s, pw string) (whole, partial []string) {
	html, _ := json.Marshal(s)
	var plain bytes.Buffer
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	whole = []string{s, fmt.Sprintf("%q", s), fmt.Sprintf("%+q", s), string(html), plain.String(),
		fmt.Sprintf("--database-url %s: refused", s)}
	if u, err := url.Parse(s); err != nil {
		partial = append(partial, err.Error(), fmt.Errorf("--redis-url: %w", err).Error())
	} else if u.User != nil {
		whole = append(whole, u.String())
	}
	if _, err := pgxpool.ParseConfig(s); err != nil {
		partial = append(partial, err.Error())
	}
	if _, err := redis.ParseURL(s); err != nil {
		partial = append(partial, err.Error())
	}
	pwJSON, _ := json.Marshal(pw)
	partial = append(partial, strconv.Quote(pw), strconv.QuoteToASCII(pw), string(pwJSON), url.PathEscape(pw),
		url.QueryEscape(pw), url.UserPassword("u", pw).String())
	return whole, partial
}

// connString is a generated connection string, its password, and the
// template it was built on.
type connString struct{ template, s, pw string }

// connStrings returns n connection strings of each template, with
// passwords drawn from r: URLs whose userinfo holds the password unescaped
// or encoded, keyword/value strings with it quoted or not, white space
// around its '=' or in it.
func connStrings(r *rand.Rand, n int) []connString {
	ws := func() string { return libpqSpace[r.IntN(len(libpqSpace))] }
	templates := []struct {
		name     string
		alphabet []string
		build    func(pw string) string
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
		{"keyword/value, unquoted space", spaced, func(pw string) string {
			return "host=h password" + ws() + "=" + ws() + pw + ws() + " port=5432 dbname=test"
		}},
		{"keyword/value, unquoted space, last", spaced, func(pw string) string {
			return "host=h" + ws() + " port=xx" + ws() + " password" + ws() + "=" + ws() + pw + ws()
		}},
		{"sslpassword", unquoted, func(pw string) string { return "host=h sslpassword=" + pw + " sslmode=bogus" }},
		{"redis url", anything, func(pw string) string { return "redis://:" + pw + "@127.0.0.1:6379/0" }},
		{"redis url, user, bad port", anything, func(pw string) string { return "redis://u:" + pw + "@127.0.0.1:xx/0" }},
		{"redis url, bare", bare, func(pw string) string { return "redis://" + pw + "@h:xx/0" }},
		{"rediss url, encoded", anything, func(pw string) string { return "rediss://:" + url.QueryEscape(pw) + "@h/x" }},
		{"unix url", anything, func(pw string) string { return "unix://:" + pw + "@/run/redis.sock" }},
	}
	var out []connString
	for _, tc := range templates {
		for range n {
			pw := password(r, tc.alphabet)
			out = append(out, connString{template: tc.name, s: tc.build(pw), pw: pw})
		}
	}
	return out
}

// Whatever characters a password holds, unescaped in a URL's userinfo, in
// a quoted keyword/value string or in an unquoted one: no fragment of it
// survives String in a text that holds the whole connection string, nor a
// Redactor made from it in whatever a parser that failed on it says or a
// printer made of it.
func TestRedactor_NoGeneratedPasswordSurvivesAnyRendering(t *testing.T) {
	t.Parallel()
	for _, c := range connStrings(rand.New(rand.NewPCG(19, 5)), 200) {
		known := redact.New("--database-url", c.s)
		whole, partial := renderings(c.s, c.pw)
		for _, text := range whole {
			if got := redact.String(text); fragment.MatchString(got) {
				t.Fatalf("%s: %q\nrendered %q\nredacted %q", c.template, c.s, text, got)
			}
		}
		for _, text := range append(whole, partial...) {
			if got := known.String(text); fragment.MatchString(got) {
				t.Fatalf("%s: %q\nrendered %q\nredacted, knowing it, %q", c.template, c.s, text, got)
			}
		}
	}
}

// Whatever a program writes of a connection string it was given, cut
// into writes anywhere, as text or in a JSON line: its Writer prints no
// fragment of the password, and JSON stays JSON.
func TestWriter_NoGeneratedPasswordSurvivesAnyCutOfTheOutput(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(19, 6))
	for _, c := range connStrings(r, 50) {
		whole, partial := renderings(c.s, c.pw)
		all := append(whole, partial...)
		text := all[r.IntN(len(all))]
		line, err := json.Marshal(map[string]any{"msg": text, "n": 1})
		require.NoError(t, err)
		for _, out := range []string{text + "\n", string(line) + "\n"} {
			var buf bytes.Buffer
			w := redact.New("--database-url", c.s).Writer(&buf)
			for rest := out; rest != ""; {
				n := 1 + r.IntN(len(rest))
				_, err := w.Write([]byte(rest[:n]))
				require.NoError(t, err)
				rest = rest[n:]
			}
			require.NoError(t, w.Flush())
			if fragment.MatchString(buf.String()) {
				t.Fatalf("%s: %q\nwritten %q\nwrote %q", c.template, c.s, out, buf.String())
			}
			if out[0] == '{' {
				require.True(t, json.Valid(buf.Bytes()), "%s: %q\nwrote %q", c.template, c.s, buf.String())
			}
		}
	}
}

// A Writer passes on whole lines, masked, and holds an unfinished one
// until Flush; text without a password goes through byte for byte; JSON
// is masked string by string and stays JSON, a document or JSON lines.
func TestWriter_MasksWholeLinesAndKeepsJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := redact.New().Writer(&buf)
	write := func(s string) {
		n, err := w.Write([]byte(s))
		require.NoError(t, err)
		require.Equal(t, len(s), n)
	}

	write("connect postgres://u:Zq")
	write("01Pw@h/db: refused\nnext")
	require.Equal(t, "connect postgres://u:xxxxx@h/db: refused\n", buf.String(), "the line, whole; the rest held")
	write(" line, \u00a0 no password\n")
	require.Equal(t, "next line, \u00a0 no password\n", strings.TrimPrefix(buf.String(), "connect postgres://u:xxxxx@h/db: refused\n"))
	buf.Reset()
	write("\r\033[Kplanning: 3 jobs read…")
	require.Empty(t, buf.String())
	require.NoError(t, w.Flush())
	require.Equal(t, "\r\033[Kplanning: 3 jobs read…", buf.String())
	require.NoError(t, w.Flush(), "nothing held")

	// A document, as the command prints results: a URL in one string,
	// an '@' in a later one, which the textual rule alone would join.
	buf.Reset()
	doc := "{\n  \"reason\": \"connect redis://:Zq02Pw@h:6379/0 <refused> & \\\"gone\\\"\",\n  \"type\": \"a@b\",\n  \"n\": [1, 2]\n}\n"
	write(doc)
	require.JSONEq(t, `{"reason": "connect redis://:xxxxx@h:6379/0 <refused> & \"gone\"", "type": "a@b", "n": [1, 2]}`, buf.String())
	require.True(t, strings.HasPrefix(buf.String(), "{\n  \"reason\": "), "the layout is kept: %s", buf.String())

	// JSON lines, as slog's JSON handler writes them.
	buf.Reset()
	write(`{"msg":"dial host=h password=Zq03Pw Zq03Px port=1"}` + "\n" + `{"msg":"ok","at":"x@y"}` + "\n")
	require.Equal(t, `{"msg":"dial host=h password=xxxxx port=1"}`+"\n"+`{"msg":"ok","at":"x@y"}`+"\n", buf.String())
}

// Writers are written from several goroutines at once (logs beside
// results): each write's lines arrive whole.
func TestWriter_ConcurrentWritesKeepTheirLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := redact.New().Writer(&buf)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				_, err := fmt.Fprintf(w, "worker %d: connect postgres://u:Zq%02dPw@h/db\n", i, i)
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Flush())
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 400)
	for _, l := range lines {
		require.Regexp(t, `^worker [0-7]: connect postgres://u:xxxxx@h/db$`, l)
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
