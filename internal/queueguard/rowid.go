package queueguard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jobguard/jobguard/jobguard"
)

// NoRowError is the refusal of a delivery whose document does not name a
// row. It wraps jobguard.ErrInvalidJobID, so jobguard.IsPermanent reports
// true: the same document never will.
type NoRowError struct {
	// Found says what the document held instead of a row id.
	Found string
}

// Error says what the document held.
func (e *NoRowError) Error() string { return "does not name a row: " + e.Found }

// Unwrap returns jobguard.ErrInvalidJobID.
func (e *NoRowError) Unwrap() error { return jobguard.ErrInvalidJobID }

// shownMax is how much of a refused number an error shows.
const shownMax = 40

// RowID reads the id of a job's row from doc, a queue's JSON document
// (River's args, an asynq task's payload): the value of its top-level key
// as PostgreSQL's jsonb reads it, which is how the reclaimer's
// riversource reads River's args (args ->> key), when that is a string
// other than "" or an integer in int64. A string is the id as spelled, for
// the start to canonicalize for its id column (jobguard.Guard.CanonicalID):
// a text column keeps "-0", "+0042" and an upper-case uuid as rows of
// their own. A number is read by its value and given in decimal, as jsonb
// prints it: -0 is 0 and 1e3 is 1000, while 1.0 and 1.50e1, which jsonb
// prints with a fraction, name no row. Anything else is a *NoRowError;
// a document that is not an object has no keys, for jsonb's -> as here.
func RowID(doc []byte, key string) (string, error) {
	refuse := func(format string, a ...any) (string, error) {
		return "", &NoRowError{Found: fmt.Sprintf(format, a...)}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(doc, &obj); err != nil || obj == nil {
		if !json.Valid(doc) {
			return refuse("not JSON")
		}
		return refuse("no key %q", key)
	}
	raw, ok := obj[key]
	if !ok {
		return refuse("no key %q", key)
	}
	raw = bytes.TrimSpace(raw)
	const want = "want a string or an integer"
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return refuse("key %q is an unreadable string: %v", key, err)
		}
		if s == "" {
			return refuse("key %q is an empty string; %s", key, want)
		}
		return s, nil
	case 'n':
		return refuse("key %q is a JSON null; %s", key, want)
	case 't', 'f':
		return refuse("key %q is a JSON boolean; %s", key, want)
	case '{':
		return refuse("key %q is a JSON object; %s", key, want)
	case '[':
		return refuse("key %q is a JSON array; %s", key, want)
	}
	if id, ok := integer(string(raw)); ok {
		return id, nil
	}
	shown := string(raw) // a JSON number: ASCII, cut anywhere
	if len(shown) > shownMax {
		shown = shown[:shownMax] + "…"
	}
	return refuse("key %q is %s; %s", key, shown, want)
}

// integer returns the JSON number num in decimal when jsonb prints it as
// an integer in int64. jsonb keeps as many fraction digits as num was
// written with, less its exponent (numeric's display scale), so 1.0 and
// 10e-1 print as 1.0, not 1.
func integer(num string) (string, bool) {
	neg := strings.HasPrefix(num, "-")
	mant, exp := strings.TrimPrefix(num, "-"), 0
	if i := strings.IndexAny(mant, "eE"); i >= 0 {
		e, err := strconv.Atoi(mant[i+1:])
		if err != nil {
			return "", false
		}
		// No payload has 2³² digits: a larger exponent decides the same,
		// and the clamp keeps the sums below from wrapping.
		mant, exp = mant[:i], max(-1<<32, min(e, 1<<32))
	}
	digits := mant
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		digits = mant[:i] + mant[i+1:]
		exp -= len(mant) - i - 1
	}
	if exp < 0 {
		return "", false // printed with a fraction
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", true
	}
	if len(digits)+exp > 19 {
		return "", false // past int64
	}
	digits += strings.Repeat("0", exp)
	if neg {
		digits = "-" + digits
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return "", false
	}
	return strconv.FormatInt(n, 10), true
}
