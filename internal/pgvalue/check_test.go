package pgvalue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/pgvalue"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// accepts reports whether the server stores value as typ.
func accepts(t *testing.T, env *testenv.Env, typ, value string) bool {
	t.Helper()
	_, err := env.Pool.Exec(context.Background(), `SELECT $1::text::`+typ, value)
	return err == nil
}

// acceptsAll reports, for each document, whether the server stores it as
// jsonb: in one round trip for those that can travel in a text array, one
// by one for the others (bytes that are not UTF-8).
func acceptsAll(t *testing.T, env *testenv.Env, docs []string) []bool {
	t.Helper()
	env.Exec(`CREATE FUNCTION stores_jsonb(doc text) RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN PERFORM doc::jsonb; RETURN true; EXCEPTION WHEN others THEN RETURN false; END $$`)
	out := make([]bool, len(docs))
	var batch []string
	var at []int
	for i, d := range docs {
		if !utf8.ValidString(d) {
			out[i] = accepts(t, env, "jsonb", d)
			continue
		}
		batch, at = append(batch, d), append(at, i)
	}
	var got []bool
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT array_agg(stores_jsonb(d) ORDER BY n) FROM unnest($1::text[]) WITH ORDINALITY AS u(d, n)`, batch).Scan(&got))
	require.Len(t, got, len(batch))
	for j, i := range at {
		out[i] = got[j]
	}
	return out
}

// The strings of the class: U+0000 anywhere, bytes that are not UTF-8
// alone and amid valid text, and their valid neighbours (U+0001, U+FFFD,
// U+FFFF, a four-byte rune). CheckText refuses exactly what the server's
// text refuses.
func TestCheckText_RefusesExactlyWhatTextRefuses(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	for _, s := range []string{
		"", "plain", "\x00", "a\x00", "\x00b", "a\x00b\x00", "\x01", "\uFFFD", "\uFFFF", "😀", "é",
		"\xff", "a\xffb", "\xc3", "\xc3(", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "ok\xe2\x82\xac",
	} {
		err := pgvalue.CheckText(s)
		require.Equal(t, accepts(t, env, "text", s), err == nil, "%q: %v", s, err)
		if err != nil {
			require.NotContains(t, err.Error(), s, "the error repeats the value")
		}
	}
}

// The documents of the class, each as json.Marshal writes a RawMessage of
// it: every escape around \u0000 and the surrogates, in values and in
// keys, nested or not; every number at and beyond numeric's bounds (the
// digits before and after the point, the exponent, zero with a huge
// exponent); and bytes that are not UTF-8. CheckJSONB refuses exactly what
// the server's jsonb refuses.
func TestCheckJSONB_RefusesExactlyWhatJsonbRefuses(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var docs []string
	fragments := []string{`\u0000`, `\\u0000`, `\\\u0000`, `\ud83d`, `\ude00`, `\ud83d\ude00`, `\udbff\udfff`,
		`\u0041`, `\\`, `\"`, `x`, `é`, `\uffff`, `\u2028`, `\u0001`, `\/`, `\n`}
	for _, a := range fragments {
		for _, b := range append([]string{""}, fragments...) {
			s := `"` + a + b + `"`
			docs = append(docs, s, `{`+s+`:1}`, `[1,{"k":[`+s+`]}]`)
		}
	}
	zeros := strings.Repeat
	small, long := []string{"0", "1", "9", "1" + zeros("0", 3)}, []string{"1" + zeros("0", 131070),
		"1" + zeros("0", 131071), "9" + zeros("9", 131071), "1" + zeros("0", 131072)}
	short, fine := []string{"", ".0", ".5"}, []string{"." + zeros("0", 16382) + "1", "." + zeros("0", 16383),
		"." + zeros("0", 16382) + "10", "." + zeros("0", 16384)}
	// Long digits before the point with short ones after it, and the other
	// way round: each bound is met on its own, the documents stay small.
	var mantissas []string
	for _, whole := range small {
		for _, frac := range append(short, fine...) {
			mantissas = append(mantissas, whole+frac)
		}
	}
	for _, whole := range long {
		for _, frac := range short {
			mantissas = append(mantissas, whole+frac)
		}
	}
	for _, m := range mantissas {
		for _, exp := range []string{"", "e0", "E+1", "e-1", "e131071", "e131072", "e-16383", "e-16384",
			"e16383", "e-131071", "e1073741822", "e1073741823", "e-1073741822", "e-1073741823",
			"e00000000000000000001", "e99999999999999999999"} {
			docs = append(docs, m+exp, "-"+m+exp)
		}
	}
	docs = append(docs, "\"\xff\"", "{\"a\xc3\":1}", `"ok"`, `{"a":[true,false,null]}`)
	var marshalled []string
	for _, d := range docs {
		doc, err := json.Marshal(json.RawMessage(d))
		if err == nil { // else not JSON: json.Marshal refuses it first
			marshalled = append(marshalled, string(doc))
		}
	}
	stored := acceptsAll(t, env, marshalled)
	checked, refused := 0, 0
	for i, doc := range marshalled {
		err := pgvalue.CheckJSONB([]byte(doc))
		require.Equal(t, stored[i], err == nil, "%.80s…: %v", doc, err)
		checked++
		if err != nil {
			refused++
		}
	}
	require.Greater(t, refused, checked/10, "the cases hardly reach the bounds")
	t.Logf("%d documents, %d refused", checked, refused)
}

// What json.Marshal writes for Go values holding U+0000 or invalid UTF-8
// (the escape; U+FFFD) is refused or stored as the server does.
func TestCheckJSONB_MarshalledGoValues(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	for _, v := range []any{
		map[string]string{"caption": "take\x00two"}, map[string]any{"k\x00": 1}, []any{"a", []string{"\x00"}},
		map[string]string{"bad": "\xff"}, map[string]any{"n": json.Number("1e131072")}, map[string]any{"n": 1e308},
		map[string]any{"id": uint64(1<<64 - 1)}, struct{ A string }{"\\u0000"},
	} {
		doc, err := json.Marshal(v)
		require.NoError(t, err)
		err = pgvalue.CheckJSONB(doc)
		require.Equal(t, accepts(t, env, "jsonb", string(doc)), err == nil, fmt.Sprintf("%s: %v", doc, err))
	}
}
