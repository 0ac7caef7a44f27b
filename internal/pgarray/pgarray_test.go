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

func TestLiterals_ReadBackAsTheSlices(t *testing.T) {
	t.Parallel()
	texts := []string{"", "a", `q"uote`, `back\slash`, "NULL", "a,b", "{}", " sp ", "한글"}
	ints := []int64{0, -1, 1 << 62, -(1 << 63)}
	times := []time.Time{
		time.Date(2026, 12, 2, 5, 0, 0, 123456789, time.FixedZone("KST", 9*3600)),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC),
	}
	for _, simple := range []bool{false, true} {
		env := testenv.New(t, testenv.Config{SimpleProtocol: simple, TimeZone: "Asia/Seoul"})
		ctx := context.Background()
		var gotTexts []string
		var gotInts []int64
		var gotTimes []time.Time
		lit, ok := pgarray.Times(times)
		require.True(t, ok)
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT $1::text[], $2::int8[], $3::timestamptz[]`,
			pgarray.Texts(texts), pgarray.Ints(ints), lit).Scan(&gotTexts, &gotInts, &gotTimes))
		require.Equal(t, texts, gotTexts)
		require.Equal(t, ints, gotInts)
		require.Len(t, gotTimes, len(times))
		for i := range times {
			require.True(t, times[i].Truncate(time.Microsecond).Equal(gotTimes[i]), "%v read back as %v", times[i], gotTimes[i])
		}
		var n int
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT cardinality($1::text[]) + cardinality($2::int8[]) + cardinality($3::timestamptz[])`,
			pgarray.Texts(nil), pgarray.Ints(nil), must(pgarray.Times(nil))).Scan(&n))
		require.Zero(t, n, "none is '{}'")
	}
	_, ok := pgarray.Times([]time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.False(t, ok, "a year the literal cannot spell")
}

func must(s string, ok bool) string {
	if !ok {
		panic("not ok")
	}
	return s
}
