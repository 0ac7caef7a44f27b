package ident

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheck_RejectsUnusableNames(t *testing.T) {
	t.Parallel()
	require.NoError(t, Check("Name", "jobs"))
	require.NoError(t, Check("Name", `we"ird.ná me`))
	require.ErrorContains(t, Check("Name", ""), "Name is empty")
	require.ErrorContains(t, Check("Name", "a\x00b"), "NUL")
	require.ErrorContains(t, Check("Name", strings.Repeat("x", 64)), "longer than 63")
}

func TestQuote_QuotesEveryPartAndSkipsEmpty(t *testing.T) {
	t.Parallel()
	require.Equal(t, `"jobs"`, Quote("", "jobs"))
	require.Equal(t, `"s"."CourseJob"`, Quote("s", "CourseJob"))
	require.Equal(t, `"a""b"."c.d"`, Quote(`a"b`, "c.d"))
}

func TestQuoteTable_ChecksBothNames(t *testing.T) {
	t.Parallel()
	q, err := QuoteTable("", "usage_ledger")
	require.NoError(t, err)
	require.Equal(t, `"usage_ledger"`, q)
	q, err = QuoteTable("billing", "ledger")
	require.NoError(t, err)
	require.Equal(t, `"billing"."ledger"`, q)
	_, err = QuoteTable("", "")
	require.ErrorContains(t, err, "Table is empty")
	_, err = QuoteTable("a\x00", "t")
	require.ErrorContains(t, err, "Schema")
}
