// Package pgarray passes Go slices to PostgreSQL as array parameters.
//
// pgx sends a nil slice as NULL, not as an empty array. Some statements
// happen to read NULL as nothing (x = ANY(NULL) and unnest(NULL) select no
// row), but NULL stored in a NOT NULL column, compared, or counted
// (cardinality(NULL) is NULL, not 0) is not '{}', and a nil slice is how Go
// spells "none" (a spec with no updates, a page with no jobs). Every slice
// the library sends as an array parameter goes through Of, so that none is
// always '{}'.
package pgarray

// Of returns s as an array parameter: s itself, or an empty slice of its
// type when s is nil, which pgx sends as '{}'.
func Of[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
