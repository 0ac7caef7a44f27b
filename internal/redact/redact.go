// Package redact hides the passwords of connection strings in text. It is
// the one place the library, its command and its examples decide what of a
// PostgreSQL or Redis URL may be printed: every error message, log record
// and help text that may hold one goes through a Redactor.
//
// The rule is textual, so that it needs no successful parse: the strings
// most likely to be printed are the ones that failed to parse (a password
// with an unescaped '@', '/', '#', a space or a quote), and a parser's
// error often quotes them whole. In any text it masks
//
//   - the password of every URL's userinfo: after "scheme://", everything
//     from the first ':' to the last '@' of the text (with no ':', the
//     whole userinfo, except for postgres:// and postgresql://, whose lone
//     userinfo is a user name);
//   - the value of every key whose name ends in "password", in any letter
//     case (password, sslpassword, PGPASSWORD), followed by '=' or ':' with
//     or without spaces: a quoted value up to its closing quote, any other
//     up to the next space, as libpq reads keyword/value strings.
//
// A parser can also print a piece of a password where the text no longer
// says it is one: url.Parse cuts a URL at an unescaped '#' and reports the
// rest of the password as an "invalid port", go-redis reports what follows
// an unescaped '/' as an invalid database number. A Redactor made with New
// from the connection strings a program was given therefore also masks
// every piece of their passwords (each run of the bytes a URL need not
// escape) wherever it appears: a piece of four bytes or more anywhere, a
// shorter one where it stands alone.
//
// It may mask more than a password (a text with an '@' after a URL loses
// what lies between them); it never keeps a piece of one it recognizes.
package redact

import (
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Mask replaces each password.
const Mask = "xxxxx"

// Redactor masks passwords in text: those the package's textual rule
// finds, and every piece of those of the connection strings it was made
// from. The zero Redactor, and nil, apply the textual rule alone. It is
// safe for concurrent use.
type Redactor struct {
	// pieces are the known passwords' pieces, longest first.
	pieces []string
}

// New returns a Redactor that also masks every piece of the passwords of
// conns: URLs or keyword/value strings, well-formed or not, as given.
func New(conns ...string) *Redactor {
	seen := map[string]bool{}
	var r Redactor
	for _, c := range conns {
		for _, sp := range spans(c) {
			pw := c[sp.from:sp.to]
			forms := []string{pw, strings.ReplaceAll(pw, `\`, "")}
			if dec, err := url.PathUnescape(pw); err == nil {
				forms = append(forms, dec)
			}
			if dec, err := url.QueryUnescape(pw); err == nil {
				forms = append(forms, dec)
			}
			for _, f := range forms {
				for _, p := range strings.FieldsFunc(f, isSeparator) {
					if p != Mask && !seen[p] {
						seen[p] = true
						r.pieces = append(r.pieces, p)
					}
				}
			}
		}
	}
	slices.SortFunc(r.pieces, func(a, b string) int { return len(b) - len(a) })
	return &r
}

// isSeparator reports whether r ends a piece of a password: a byte a URL
// must escape, or one that is not UTF-8 (which quoting escapes).
func isSeparator(r rune) bool {
	return r == utf8.RuneError || r < 0x80 && !isPieceByte(byte(r))
}

// isPieceByte reports whether c is a byte a URL need not escape (a letter,
// a digit, '-', '.', '_', '~'), or part of a character beyond ASCII: the
// bytes a parser never splits a password at.
func isPieceByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c >= 0x80
}

// String returns s with every password in it masked, as the package doc
// describes. It is idempotent.
func String(s string) string { return (*Redactor)(nil).String(s) }

// String returns s with every password in it masked: those the textual
// rule finds, and every piece of the known ones. It is idempotent.
func (r *Redactor) String(s string) string {
	s = mask(s)
	if r == nil {
		return s
	}
	for _, p := range r.pieces {
		s = maskPiece(s, p)
	}
	return s
}

// mask applies the textual rule.
func mask(s string) string {
	if !strings.Contains(s, "://") && !strings.Contains(strings.ToLower(s), "password") {
		return s // the common case, at no cost
	}
	var b strings.Builder
	at := 0
	for _, sp := range spans(s) {
		b.WriteString(s[at:sp.from])
		b.WriteString(Mask)
		at = sp.to
	}
	b.WriteString(s[at:])
	return b.String()
}

// maskPiece masks every occurrence of the known piece p in s: anywhere
// when it is four bytes or more, else where it stands alone.
func maskPiece(s, p string) string {
	if !strings.Contains(s, p) {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, p)
		if i < 0 {
			break
		}
		end := i + len(p)
		alone := (i == 0 || !isPieceByte(s[i-1])) && (end == len(s) || !isPieceByte(s[end]))
		b.WriteString(s[:i])
		if len(p) >= 4 || alone {
			b.WriteString(Mask)
		} else {
			b.WriteString(p)
		}
		s = s[end:]
	}
	b.WriteString(s)
	return b.String()
}

// span is the byte range of a password in a text.
type span struct{ from, to int }

// spans returns the passwords the textual rule finds in s, in order and
// apart: spans that overlap are one.
func spans(s string) []span {
	all := append(userinfo(s), keyValues(s)...)
	slices.SortFunc(all, func(a, b span) int { return a.from - b.from })
	var out []span
	for _, sp := range all {
		if n := len(out); n > 0 && sp.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, sp.to)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// userinfo returns the passwords of URLs' userinfo in s.
func userinfo(s string) []span {
	var out []span
	for off := 0; ; {
		i := strings.Index(s[off:], "://")
		if i < 0 {
			return out
		}
		from := off + i + 3
		at := strings.LastIndexByte(s[from:], '@')
		if at < 0 {
			return out // no userinfo here, nor in any later URL
		}
		at += from
		switch c := strings.IndexByte(s[from:at], ':'); {
		case c >= 0:
			out = append(out, span{from + c + 1, at})
		case !namesUser(scheme(s[:off+i])):
			out = append(out, span{from, at})
		}
		off = at
	}
}

// scheme returns the URL scheme that ends before, in lower case.
func scheme(before string) string {
	i := len(before)
	for i > 0 && isSchemeByte(before[i-1]) {
		i--
	}
	return strings.ToLower(before[i:])
}

func isSchemeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

// namesUser reports whether a userinfo without ':' is a user name in the
// scheme's URLs. Redis URLs ("redis://secret@host") are often written with
// the password alone there.
func namesUser(scheme string) bool { return scheme == "postgres" || scheme == "postgresql" }

// keyValues returns the values of the password keys in s. A quoted value's
// span is inside its quotes.
func keyValues(s string) []span {
	lower := strings.ToLower(s)
	var out []span
	for i := 0; ; {
		k := strings.Index(lower[i:], "password")
		if k < 0 {
			return out
		}
		end := i + k + len("password")
		i = end
		v, ok := valueStart(s, end)
		if !ok {
			continue
		}
		sp := valueSpan(s, v)
		if sp.to > sp.from {
			out = append(out, sp)
		}
		i = max(sp.to, end)
	}
}

// valueStart returns where the value of the key that ends at i starts,
// and whether one does: the key's closing quote, spaces, then '=' or ':',
// then spaces.
func valueStart(s string, i int) (int, bool) {
	if i < len(s) && (s[i] == '"' || s[i] == '\'') {
		i++ // a quoted key: "password": "…"
	}
	i = skipSpaces(s, i)
	if i >= len(s) || (s[i] != '=' && s[i] != ':') {
		return 0, false
	}
	return skipSpaces(s, i+1), true
}

// valueSpan returns the value that starts at i: inside its quotes when it
// is quoted, else up to the next space (a backslash escapes the next byte).
// A quoted value closes at the last quote before the next keyword
// (" name="), or else at the last quote of the text: it may hold escaped
// quotes, and a text quoted again (by Go, by JSON) escapes its escapes, so
// the first unescaped quote is not surely its end. An unclosed value runs
// to the end.
func valueSpan(s string, i int) span {
	if i < len(s) && (s[i] == '\'' || s[i] == '"') {
		q, rest := s[i], s[i+1:]
		limit := len(rest)
		if loc := nextKeyword.FindStringIndex(rest); loc != nil {
			limit = loc[0]
		}
		end := strings.LastIndexByte(rest[:limit], q)
		if end < 0 {
			end = strings.LastIndexByte(rest, q)
		}
		if end < 0 {
			return span{i + 1, len(s)}
		}
		return span{i + 1, i + 1 + end}
	}
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case ' ', '\t', '\n', '\r':
			return span{i, j}
		}
	}
	return span{i, len(s)}
}

// nextKeyword finds the start of a keyword/value string's next pair.
var nextKeyword = regexp.MustCompile(`\s[A-Za-z_]+\s*=`)

func skipSpaces(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// Error returns err with its message passed through String, or nil for
// nil.
func Error(err error) error { return (*Redactor)(nil).Error(err) }

// Error returns err with its message passed through r, or nil for nil.
// errors.Is and errors.As still see err's chain, whose own messages are
// not redacted: print the returned error, not what As finds in it.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	return &redacted{err: err, msg: r.String(err.Error())}
}

type redacted struct {
	err error
	msg string
}

func (e *redacted) Error() string { return e.msg }

func (e *redacted) Unwrap() error { return e.err }

// Handler returns a handler that passes every record through String
// before h handles it.
func Handler(h slog.Handler) slog.Handler { return (*Redactor)(nil).Handler(h) }

// Handler returns a handler that passes every record's message and every
// attribute's value (errors and fmt.Stringers as their redacted text,
// groups attribute by attribute) through r before h handles them, so that
// text and JSON logs alike hold no password.
func (r *Redactor) Handler(h slog.Handler) slog.Handler { return handler{r: r, h: h} }

type handler struct {
	r *Redactor
	h slog.Handler
}

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.r.Attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = h.r.Attr(a)
	}
	return handler{r: h.r, h: h.h.WithAttrs(clean)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{r: h.r, h: h.h.WithGroup(name)} }

// Attr returns a with its value passed through r: a string, an error's or
// a fmt.Stringer's text (as a string), each attribute of a group. Other
// values are kept.
func (r *Redactor) Attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = r.Attr(g)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, r.String(x.Error()))
		case interface{ String() string }:
			return slog.String(a.Key, r.String(x.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
