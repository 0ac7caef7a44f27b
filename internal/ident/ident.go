// Package ident validates and quotes SQL identifiers.
//
// Every table and column name that jobguard puts into SQL passes through Quote:
// names are checked (non-empty, no NUL byte, at most 63 bytes, which is where
// PostgreSQL would otherwise truncate silently) and then quoted with
// pgx.Identifier.Sanitize, so a name is never spliced into SQL as written.
package ident

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// MaxLen is the longest identifier PostgreSQL keeps whole (NAMEDATALEN - 1).
const MaxLen = 63

// Check reports whether name can be used as an identifier. field names the
// configuration field it came from, for the error message.
func Check(field, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", field)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%s %q contains a NUL byte", field, name)
	case len(name) > MaxLen:
		return fmt.Errorf("%s %q is longer than %d bytes; PostgreSQL would truncate it", field, name, MaxLen)
	}
	return nil
}

// Quote returns the quoted, dot-joined form of the non-empty parts, such as
// "schema"."table". Empty parts are skipped, so an empty schema yields a name
// resolved through search_path.
func Quote(parts ...string) string {
	id := make(pgx.Identifier, 0, len(parts))
	for _, p := range parts {
		if p != "" {
			id = append(id, p)
		}
	}
	return id.Sanitize()
}

// QuoteTable checks a configured table name and its optional schema (the
// fields named Table and Schema in errors) and returns them quoted.
func QuoteTable(schema, table string) (string, error) {
	if err := Check("Table", table); err != nil {
		return "", err
	}
	if schema != "" {
		if err := Check("Schema", schema); err != nil {
			return "", err
		}
	}
	return Quote(schema, table), nil
}

// Literal returns s as an escape string constant (E'...'), for the few
// values that must be written into SQL rather than sent as parameters: a
// status a partial index's predicate names, which a parameter would hide
// from the planner. The E form escapes the same way whatever the server's
// standard_conforming_strings. s must not contain a NUL byte (PostgreSQL
// text cannot hold one; Table.validate refuses it first).
func Literal(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `'`, `''`)
	return "E'" + s + "'"
}
