package pgvalue_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/pgvalue"
)

// Every number reads back with its digits, in objects, arrays and nested
// values, and marshals again to the text it was read from (each document
// is written as json.Marshal writes it: keys sorted, no spaces).
func TestUnmarshalJSON_KeepsEveryNumberExactly(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		`{"a":9223372036854775807,"b":18446744073709551615,"c":-9223372036854775808,"d":9007199254740993}`,
		`{"big":123456789012345678901234567890,"exp":1e+400,"frac":0.1,"tiny":1e-300}`,
		`[[1,2,[9007199254740993]],{"x":{"y":[18446744073709551616]}}]`,
		`{"n":null,"neg":-0,"s":"9007199254740993","t":true,"zero":0}`,
		`9007199254740993`,
	} {
		var v any
		require.NoError(t, pgvalue.UnmarshalJSON(doc, &v))
		got, err := json.Marshal(v)
		require.NoError(t, err)
		require.Equal(t, doc, string(got))
	}
	var m map[string]any
	require.NoError(t, pgvalue.UnmarshalJSON(" {\"a\":1}\n", &m))
	require.Equal(t, json.Number("1"), m["a"])
}

// A document is one JSON value, as json.Unmarshal reads it.
func TestUnmarshalJSON_RefusesWhatIsNotOneValue(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{``, ` `, `{"a":1} {"b":2}`, `{"a":1} x`, `{"a":`, `nul`, `[1]]`} {
		var v any
		require.Error(t, pgvalue.UnmarshalJSON(bad, &v), bad)
		require.Error(t, json.Unmarshal([]byte(bad), &v), bad)
	}
}
