package pgarray_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// A nil slice of every element type the library sends reaches the server
// as an empty array, in both protocols; pgx alone sends NULL.
func TestOf_NilSliceIsAnEmptyArray(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		env := testenv.New(t, testenv.Config{SimpleProtocol: simple})
		ctx := context.Background()
		for name, tc := range map[string]struct {
			typ      string
			raw, arg any
		}{
			"text":        {"text[]", []string(nil), pgarray.Of([]string(nil))},
			"int8":        {"int8[]", []int64(nil), pgarray.Of([]int64(nil))},
			"timestamptz": {"timestamptz[]", []time.Time(nil), pgarray.Of([]time.Time(nil))},
		} {
			var isNull bool
			require.NoError(t, env.Pool.QueryRow(ctx, `SELECT $1::`+tc.typ+` IS NULL`, tc.raw).Scan(&isNull))
			require.True(t, isNull, "%s: pgx sends a nil slice as NULL; Of exists for that", name)
			var n *int
			require.NoError(t, env.Pool.QueryRow(ctx, `SELECT cardinality($1::`+tc.typ+`)`, tc.arg).Scan(&n))
			require.NotNil(t, n, "%s (simple protocol %v): sent as NULL", name, simple)
			require.Zero(t, *n, name)
		}
		given := []string{"a"}
		require.Equal(t, &given[0], &pgarray.Of(given)[0], "a slice that is not nil is passed as it is")
	}
}
