package riverguard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim/riversource"
)

// NoRowError is the refusal of a River job whose args do not name a row of
// the jobs table: the key is missing, null, empty, or not a string or an
// integer. The rule is riversource's, so that the middleware starts the row
// the reclaimer watches. It wraps riversource.ErrNoRowID and
// jobguard.ErrInvalidJobID, so jobguard.IsPermanent reports true: the same
// args can never name a row, and River cancels the job instead of retrying
// it.
type NoRowError struct {
	// RiverJobID is the River job's id.
	RiverJobID int64
	// Key is the args key read (Config.RowIDKey).
	Key string
	// Found says what the key held instead of a row id.
	Found string
}

// Error names the River job, the key and what it held.
func (e *NoRowError) Error() string {
	return fmt.Sprintf("riverguard: river job %d: args do not name a row: %s", e.RiverJobID, e.Found)
}

// Unwrap returns riversource.ErrNoRowID and jobguard.ErrInvalidJobID.
func (e *NoRowError) Unwrap() []error {
	return []error{riversource.ErrNoRowID, jobguard.ErrInvalidJobID}
}

// rowID reads the id of the job's row from River's encoded args: the value
// of the top-level key, a JSON string (not empty) or a JSON integer (in
// int64), as riversource reads it from the same args in the database. A
// failure is a *NoRowError without its RiverJobID.
//
// River hands a worker the args as Postgres printed them from jsonb, so a
// number arrives in jsonb's canonical form (1e3 as 1000), which is what
// riversource's args ->> key sees too.
func rowID(args []byte, key string) (string, error) {
	refuse := func(format string, a ...any) (string, error) {
		return "", &NoRowError{Key: key, Found: fmt.Sprintf(format, a...)}
	}
	var obj map[string]json.RawMessage
	// An array, a scalar or null has no keys, for jsonb's -> as for us.
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		if !json.Valid(args) {
			return refuse("args are not JSON")
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
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return refuse("key %q is %s; %s", key, raw, want)
	}
	return strconv.FormatInt(n, 10), nil
}
