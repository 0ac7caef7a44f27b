// Package redact hides the passwords of connection strings in text. It is
// the one place the library, its command and its examples decide what of a
// PostgreSQL or Redis URL may be printed: every error message, log record,
// help text and result that may hold one goes through a Redactor, and a
// Writer passes all that a program prints through one.
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
//     case (password, sslpassword, PGPASSWORD), followed by '=' or ':',
//     with libpq's white space (" \t\n\r\v\f") or none on either side: a
//     quoted value up to its closing quote; any other up to the next
//     keyword (white space, a name and '='; or ':' after a ':' key) or the
//     end of the text, white space and all, since a password with a space
//     left unquoted does not parse and its error quotes it whole. Inside a
//     text quoted by a backquote, a double or a single quote (pgx's
//     "cannot parse `...`"), such a value ends at the last such quote
//     before the next keyword.
//
// A parser can also print a piece of a password where the text no longer
// says it is one: url.Parse cuts a URL at an unescaped '#' and reports the
// rest of the password as an "invalid port", go-redis reports what follows
// an unescaped '/' as an invalid database number, pgx names a word of a
// password with a space as a keyword without '='. A Redactor made with New
// from the connection strings a program was given therefore also knows
// every piece of their passwords (each run of the bytes a URL need not
// escape and of the characters beyond ASCII that Go prints as they are,
// and each run of ASCII in one) and each password whole in every form a
// printer writes it (quoted by Go's %q and %+q and by JSON, percent-encoded
// in a path, a query and a userinfo), and masks them wherever they appear:
// one of four bytes or more anywhere, a shorter one where it stands alone.
//
// It may mask more than a password (a text with an '@' after a URL loses
// what lies between them); it never keeps a piece of one it recognizes.
package redact

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Mask replaces each password.
const Mask = "xxxxx"

// Redactor masks passwords in text: those the package's textual rule
// finds, and every piece of those of the connection strings it was made
// from. The zero Redactor, and nil, apply the textual rule alone. It is
// safe for concurrent use.
type Redactor struct {
	// pieces are what output may hold of the known passwords: their
	// pieces, and each whole as printers escape it; longest first.
	pieces []string
}

// New returns a Redactor that also masks every piece of the passwords of
// conns, and each of them whole in every form a printer writes it: URLs or
// keyword/value strings, well-formed or not, as given.
func New(conns ...string) *Redactor {
	k := known{seen: map[string]bool{}}
	for _, c := range conns {
		for _, sp := range spans(c) {
			k.password(c[sp.from:sp.to])
		}
	}
	slices.SortFunc(k.pieces, func(a, b string) int { return len(b) - len(a) })
	return &Redactor{pieces: k.pieces}
}

// known gathers the pieces of known passwords, each once.
type known struct {
	seen   map[string]bool
	pieces []string
}

// password adds what output may hold of pw: pw as written and as its
// escapes decode, whole, in pieces, and as printers escape it.
func (k *known) password(pw string) {
	forms := []string{pw, strings.ReplaceAll(pw, `\`, "")}
	if dec, err := url.PathUnescape(pw); err == nil {
		forms = append(forms, dec)
	}
	if dec, err := url.QueryUnescape(pw); err == nil {
		forms = append(forms, dec)
	}
	for _, f := range forms {
		k.add(f)
		for _, p := range strings.FieldsFunc(f, isSeparator) {
			k.add(p)
			// Printers that escape every character beyond ASCII (%+q,
			// percent-encoding) keep only its runs of ASCII as they are.
			for _, a := range strings.FieldsFunc(p, func(r rune) bool { return r >= utf8.RuneSelf }) {
				k.add(a)
			}
		}
		for _, e := range escapes(f) {
			k.add(e)
		}
	}
}

// add adds p, unless it is empty, already known, or part of the mask
// (which would make String mask its own output again).
func (k *known) add(p string) {
	if p == "" || k.seen[p] || strings.Contains(Mask, p) {
		return
	}
	k.seen[p] = true
	k.pieces = append(k.pieces, p)
}

// escapes returns s as printers write it inside their quotes: Go's %q and
// %+q, JSON with and without its HTML escapes, and percent-encoded as a
// path, a query value and a userinfo password.
func escapes(s string) []string {
	html, _ := json.Marshal(s) // a string always marshals
	return []string{unquote(strconv.Quote(s)), unquote(strconv.QuoteToASCII(s)), unquote(string(html)),
		unquote(string(jsonString(nil, s))), url.PathEscape(s), url.QueryEscape(s),
		strings.TrimPrefix(url.UserPassword("", s).String(), ":")}
}

// unquote returns q without its first and last byte, its quotes.
func unquote(q string) string { return q[1 : len(q)-1] }

// jsonString appends s to b as a JSON string, without HTML escapes, as
// the command and slog's JSON handler write strings.
func jsonString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// isSeparator reports whether r ends a piece of a password: a byte a URL
// must escape, a byte that is not UTF-8, or a character that Go's %q
// writes as an escape (a no-break space, a zero-width space, a soft hyphen,
// a line separator, which JSON escapes too).
func isSeparator(r rune) bool {
	if r < utf8.RuneSelf {
		return !isPieceByte(byte(r))
	}
	return r == utf8.RuneError || !strconv.IsPrint(r)
}

// isPieceByte reports whether the ASCII byte c is one a URL need not
// escape: a letter, a digit, '-', '.', '_', '~'.
func isPieceByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
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
// when it is four bytes or more, else where it stands alone (between
// separators or the ends of s).
func maskPiece(s, p string) string {
	if !strings.Contains(s, p) {
		return s
	}
	var b strings.Builder
	at := 0
	for from := 0; from < len(s); {
		i := strings.Index(s[from:], p)
		if i < 0 {
			break
		}
		i += from
		end := i + len(p)
		if len(p) < 4 && !alone(s, i, end) {
			from = i + 1
			continue
		}
		b.WriteString(s[at:i])
		b.WriteString(Mask)
		at, from = end, end
	}
	b.WriteString(s[at:])
	return b.String()
}

// alone reports whether s[i:end] stands between separators or the ends of
// s.
func alone(s string, i, end int) bool {
	before, _ := utf8.DecodeLastRuneInString(s[:i])
	after, _ := utf8.DecodeRuneInString(s[end:])
	return (i == 0 || isSeparator(before)) && (end == len(s) || isSeparator(after))
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
		key := i + k
		end := key + len("password")
		i = end
		v, sep, ok := valueStart(s, end)
		if !ok {
			continue
		}
		sp := valueSpan(s, key, end, v, sep)
		if sp.to > sp.from {
			out = append(out, sp)
		}
		i = max(sp.to, end)
	}
}

// valueStart returns where the value of the key that ends at i starts,
// and the byte between them, if one does: the key's closing quote, white
// space, '=' or ':', white space.
func valueStart(s string, i int) (int, byte, bool) {
	if i < len(s) && (s[i] == '"' || s[i] == '\'') {
		i++ // a quoted key: "password": "…"
	}
	i = skipSpaces(s, i)
	if i >= len(s) || (s[i] != '=' && s[i] != ':') {
		return 0, 0, false
	}
	return skipSpaces(s, i+1), s[i], true
}

// valueSpan returns the value that starts at i, of the key that spans
// s[key:keyEnd] and ends with sep.
//
// A quoted value is inside its quotes. It closes at the last quote before
// the next keyword (" name="), or else at the last quote of the text: it
// may hold escaped quotes, and a text quoted again (by Go, by JSON)
// escapes its escapes, so the first unescaped quote is not surely its end.
// An unclosed value runs to the end.
//
// Any other value runs to the next keyword or the end of the text, less
// the white space before it: libpq ends it at a space, but a password with
// a space left unquoted fails to parse and is quoted whole in the error.
// Inside a quoted text, it ends at that quote's last occurrence before.
func valueSpan(s string, key, keyEnd, i int, sep byte) span {
	if i < len(s) && (s[i] == '\'' || s[i] == '"') {
		q, rest := s[i], s[i+1:]
		limit := len(rest)
		if loc := nextKeyword(rest, '='); loc >= 0 {
			limit = loc
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
	limit := len(s)
	if loc := nextKeyword(s[i:], sep); loc >= 0 {
		limit = i + loc
	}
	if q, ok := enclosing(s, key, keyEnd); ok {
		if end := strings.LastIndexByte(s[i:limit], q); end >= 0 {
			limit = i + end
		}
	}
	return span{i, trimSpaces(s, i, limit)}
}

// keywordEq and keywordColon find a keyword/value string's next pair:
// white space, a name, white space and '=' (or ':'). The white space is
// libpq's, or an escape of it (\n, \u000b) in a text quoted again.
var (
	keywordEq    = regexp.MustCompile(space + `[A-Za-z_]+` + space + `*=`)
	keywordColon = regexp.MustCompile(space + `[A-Za-z_]+` + space + `*[=:]`)
)

// space matches what spaceAt finds.
const space = `(?:[ \t\n\r\v\f]|\\[ntrvf]|\\u000[9a-dA-D])`

// nextKeyword returns where the next keyword after a value starts in s,
// or -1: the white space before a name and '=' (or ':' too, after a key
// that ended with one), unless a backslash escapes that white space.
func nextKeyword(s string, sep byte) int {
	re := keywordEq
	if sep == ':' {
		re = keywordColon
	}
	for _, loc := range re.FindAllStringIndex(s, -1) {
		if loc[0] == 0 || s[loc[0]-1] != '\\' {
			return loc[0]
		}
	}
	return -1
}

// enclosing returns the quote (backquote, double or single) of the text that
// the key s[key:keyEnd] stands in, if it stands in one: of the quotes that
// occur an odd number of times before the key's name (its own quotes
// aside), the last one.
func enclosing(s string, key, keyEnd int) (byte, bool) {
	name := key
	for name > 0 && isNameByte(s[name-1]) {
		name--
	}
	var q byte
	last := -1
	for _, c := range []byte{'`', '"', '\''} {
		before := s[:name]
		if name > 0 && s[name-1] == c && keyEnd < len(s) && s[keyEnd] == c {
			before = s[:name-1] // the key's own opening quote
		}
		if at := strings.LastIndexByte(before, c); strings.Count(before, string(c))%2 == 1 && at > last {
			q, last = c, at
		}
	}
	return q, last >= 0
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// isSpace reports whether c is white space to libpq: " \t\n\r\v\f".
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// spaceAt returns the length of the white space at s[i], 0 if there is
// none: a byte of libpq's, or one as Go's %q or JSON escapes it (\n, \v,
// \u000b), since a connection string quoted again holds those.
func spaceAt(s string, i int) int {
	switch {
	case i < 0 || i >= len(s):
		return 0
	case isSpace(s[i]):
		return 1
	case s[i] != '\\' || i+1 == len(s):
		return 0
	case strings.IndexByte("ntrvf", s[i+1]) >= 0:
		return 2
	case strings.HasPrefix(s[i+1:], "u000") && i+5 < len(s) && strings.IndexByte("9abcdABCD", s[i+5]) >= 0:
		return 6
	}
	return 0
}

// skipSpaces returns where the white space that starts at i ends.
func skipSpaces(s string, i int) int {
	for n := spaceAt(s, i); n > 0; n = spaceAt(s, i) {
		i += n
	}
	return i
}

// trimSpaces returns where the white space that ends at end, after from,
// starts.
func trimSpaces(s string, from, end int) int {
	for end > from {
		switch {
		case spaceAt(s, end-1) == 1:
			end--
		case end-2 >= from && spaceAt(s, end-2) == 2:
			end -= 2
		case end-6 >= from && spaceAt(s, end-6) == 6:
			end -= 6
		default:
			return end
		}
	}
	return end
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

// Writer is an io.Writer that masks, with its Redactor, the passwords in
// everything written to it before the writer it wraps gets it: the one
// place all that a program prints (results, errors, logs, help) passes, so
// that no output can forget. It masks whole lines: what follows the last
// newline is held until a newline or Flush ends it, so that a password
// written in several calls is seen whole. A text of JSON values (a
// document, or JSON lines) is masked string by string, so that it stays
// JSON. It is safe for concurrent use.
type Writer struct {
	r  *Redactor
	w  io.Writer
	mu sync.Mutex
	// held is the unfinished last line.
	held []byte
}

// Writer returns a Writer that writes to w what is written to it, with
// the passwords r finds masked.
func (r *Redactor) Writer(w io.Writer) *Writer { return &Writer{r: r, w: w} }

// Write masks every line that p ends and writes them to the wrapped writer
// in one call; it holds the rest. It returns len(p), with the wrapped
// writer's error.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = append(w.held, p...)
	n := bytes.LastIndexByte(w.held, '\n') + 1
	if n == 0 {
		return len(p), nil
	}
	_, err := w.w.Write(w.r.output(w.held[:n]))
	w.held = w.held[:copy(w.held, w.held[n:])]
	return len(p), err
}

// Flush masks and writes what is held: a line that no newline ended yet
// (a progress line, the end of the output).
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.held) == 0 {
		return nil
	}
	_, err := w.w.Write(w.r.output(w.held))
	w.held = w.held[:0]
	return err
}

// output masks b, a program's output: string by string when it is JSON
// values, else as text.
func (r *Redactor) output(b []byte) []byte {
	if isJSON(b) {
		return r.jsonStrings(b)
	}
	return []byte(r.String(string(b)))
}

// isJSON reports whether b is one or more JSON objects or arrays, apart
// or on lines of their own.
func isJSON(b []byte) bool {
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || (t[0] != '{' && t[0] != '[') {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var v json.RawMessage
		switch err := dec.Decode(&v); {
		case err == io.EOF:
			return true
		case err != nil:
			return false
		}
	}
}

// jsonStrings returns b, valid JSON, with each string (keys too) masked
// apart and written again as JSON; the rest is kept byte for byte.
func (r *Redactor) jsonStrings(b []byte) []byte {
	var out []byte
	at := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		j := i + 1
		for ; b[j] != '"'; j++ {
			if b[j] == '\\' {
				j++
			}
		}
		var s string
		if err := json.Unmarshal(b[i:j+1], &s); err == nil {
			if masked := r.String(s); masked != s {
				out = append(out, b[at:i]...)
				out = jsonString(out, masked)
				at = j + 1
			}
		}
		i = j
	}
	if out == nil {
		return b
	}
	return append(out, b[at:]...)
}
