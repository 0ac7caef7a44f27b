// Package pgvalue keeps caller values exact on their way through
// PostgreSQL: what the server would refuse is found before anything is
// sent, and JSON read back from a jsonb column keeps its numbers as they
// were written.
//
// A Go string may hold U+0000 and bytes that are not UTF-8, and
// encoding/json writes valid JSON for both (the escape \u0000, and U+FFFD
// in place of each bad byte); a json.RawMessage may hold any escape and any
// number. PostgreSQL refuses U+0000 and invalid UTF-8 in text, and jsonb
// also refuses \u0000, the escape of half a surrogate pair, and numbers
// beyond numeric's range. A statement that sends one fails, and inside a
// transaction (a completion's) it rolls everything back, on every try.
// CheckText and CheckJSONB say so first, so that the library refuses such
// a value where it enters, naming the field.
//
// encoding/json decodes a number into an interface value as a float64,
// which holds integers exactly only up to 2^53: a request id, an int64 or
// a uint64 beyond it comes back rounded. Every JSON the library reads from
// the database and later writes again, or returns to its caller, is
// decoded with UnmarshalJSON, which keeps each number as a json.Number
// (its digits as jsonb printed them).
package pgvalue

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// UnmarshalJSON decodes the JSON document doc into v as json.Unmarshal
// does, except that a number decoded into an interface value is a
// json.Number, not a float64. Anything after the document is an error.
func UnmarshalJSON(doc string, v any) error {
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("invalid character after top-level value")
	}
	return nil
}

// The limits of PostgreSQL's numeric, which holds jsonb's numbers: at most
// 131072 decimal digits before the point (a weight of 32767 base-10000
// digits) and 16383 after it, and an exponent short of 2^30 in its text.
const (
	maxLeadingPower = 4*32767 + 3 // the power of ten of the largest leading digit
	maxScale        = 16383
	maxExponent     = 1<<30 - 2
)

// CheckText returns an error when PostgreSQL cannot store s as text: it
// holds U+0000, or is not valid UTF-8 (a database in the UTF8 encoding
// refuses both). The error says where, not what s holds.
func CheckText(s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Errorf("holds U+0000 at byte %d, which PostgreSQL text cannot store", i)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("is not valid UTF-8 at byte %d", invalidAt(s))
	}
	return nil
}

// CheckJSONB returns an error when jsonb refuses doc, a JSON document as
// encoding/json writes it (json.Marshal validates the syntax, also of a
// json.RawMessage): it is not valid UTF-8; a string or a key holds the
// escape \u0000 (json.Marshal writes U+0000 so), or a \u escape of half a
// surrogate pair without its other half; or a number is beyond numeric's
// range (1e131072, 1e-16384). The error says where, not what doc holds.
func CheckJSONB(doc []byte) error {
	if !utf8.Valid(doc) {
		return fmt.Errorf("is not valid UTF-8 at byte %d", invalidAt(string(doc)))
	}
	for i := 0; i < len(doc); {
		switch c := doc[i]; {
		case c == '"':
			end, err := checkString(doc, i)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end, err := checkNumber(doc, i)
			if err != nil {
				return err
			}
			i = end
		default:
			i++
		}
	}
	return nil
}

// checkString checks the string that opens at doc[at] and returns the index
// after its closing quote.
func checkString(doc []byte, at int) (int, error) {
	i := at + 1
	for i < len(doc) {
		switch doc[i] {
		case '"':
			return i + 1, nil
		case '\\':
			n, err := checkEscape(doc, i)
			if err != nil {
				return 0, err
			}
			i += n
		default:
			i++
		}
	}
	return i, nil
}

// checkEscape checks the escape that opens at doc[at], which jsonb cannot
// store when it is \u0000 or half a surrogate pair, and returns how many
// bytes to step over: the escape's first two, or, for a pair, its first
// half and the second's backslash and u.
func checkEscape(doc []byte, at int) (int, error) {
	if at+1 >= len(doc) || doc[at+1] != 'u' {
		return 2, nil
	}
	r, ok := hex4(doc, at+2)
	switch {
	case !ok:
		return 2, nil
	case r == 0:
		return 0, fmt.Errorf("holds the escape \\u0000 at byte %d, which jsonb cannot store", at)
	case !utf16.IsSurrogate(r):
		return 2, nil
	}
	low, ok := rune(0), false
	if at+7 < len(doc) && doc[at+6] == '\\' && doc[at+7] == 'u' {
		low, ok = hex4(doc, at+8)
	}
	if r >= 0xdc00 || !ok || low < 0xdc00 || low > 0xdfff {
		return 0, fmt.Errorf("holds the escape of half a surrogate pair at byte %d, which jsonb cannot store", at)
	}
	return 8, nil
}

// hex4 reads the four hex digits at doc[at:].
func hex4(doc []byte, at int) (rune, bool) {
	if at+4 > len(doc) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(doc[at:at+4]), 16, 16)
	return rune(v), err == nil
}

// checkNumber checks the number that starts at doc[at] against numeric's
// range, as PostgreSQL's numeric input reads it, and returns the index
// after it.
func checkNumber(doc []byte, at int) (int, error) {
	n, end := scanNumber(doc, at)
	if !n.fitsNumeric() {
		return 0, numberError(doc, at, end)
	}
	return end, nil
}

// number is a JSON number's digits, as written.
type number struct {
	whole, frac, exp string
	negExp           bool
}

// scanNumber reads the number that starts at doc[at] and returns it and
// the index after it.
func scanNumber(doc []byte, at int) (number, int) {
	i := at
	if doc[i] == '-' {
		i++
	}
	digits := func() string {
		start := i
		for i < len(doc) && doc[i] >= '0' && doc[i] <= '9' {
			i++
		}
		return string(doc[start:i])
	}
	var n number
	n.whole = digits()
	if i < len(doc) && doc[i] == '.' {
		i++
		n.frac = digits()
	}
	if i < len(doc) && (doc[i] == 'e' || doc[i] == 'E') {
		i++
		if i < len(doc) && (doc[i] == '+' || doc[i] == '-') {
			n.negExp = doc[i] == '-'
			i++
		}
		n.exp = digits()
	}
	return n, i
}

// fitsNumeric reports whether numeric's range holds n: its exponent, its
// scale and the power of ten of its leading digit.
func (n number) fitsNumeric() bool {
	e := strings.TrimLeft(n.exp, "0")
	if len(e) > 10 {
		return false
	}
	exp, _ := strconv.ParseInt("0"+e, 10, 64)
	if n.negExp {
		exp = -exp
	}
	if exp > maxExponent || exp < -maxExponent {
		return false
	}
	// The scale counts every digit after the point, trailing zeros too.
	if int64(len(n.frac))-exp > maxScale {
		return false
	}
	// The power of ten of the leading digit that is not zero, if any.
	if w := strings.TrimLeft(n.whole, "0"); w != "" {
		return int64(len(w)-1)+exp <= maxLeadingPower
	}
	if f := strings.TrimLeft(n.frac, "0"); f != "" {
		return int64(-(len(n.frac)-len(f))-1)+exp <= maxLeadingPower
	}
	return true
}

func numberError(doc []byte, at, end int) error {
	n := string(doc[at:end])
	if len(n) > 24 {
		n = n[:24] + "…"
	}
	return fmt.Errorf("holds the number %s at byte %d, beyond the range of jsonb's numeric", n, at)
}

// invalidAt is the index of the first byte of s that is not valid UTF-8.
func invalidAt(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return len(s)
}

// StorableText returns s as a text column can store it: each U+0000 as the
// four characters \x00, each byte that is not UTF-8 as U+FFFD. It is for
// messages the library writes (an error on a record), not for caller
// values, which are refused instead (CheckText): a message may lose a
// byte, a value must not.
func StorableText(s string) string {
	if CheckText(s) == nil {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", `\x00`), "\uFFFD")
}
