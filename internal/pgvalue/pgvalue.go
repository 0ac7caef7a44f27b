// Package pgvalue keeps caller values exact on their way through
// PostgreSQL: JSON read back from a jsonb column keeps its numbers as they
// were written.
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
	"io"
	"strings"
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
