package pgarray

import (
	"strconv"
	"strings"
	"time"
)

// The literals below are array parameters built as one string: pgx sends
// a string in text format whatever the parameter's type, and the server
// reads it as the array the statement casts it to (text[], uuid[],
// timestamptz[], int8[]). A slice of thousands of elements is then one
// allocation, where pgx would box every element to encode it. Each
// element is quoted, so that no value (an empty string, NULL, a comma, a
// brace) is read as anything but itself; none is always '{}'.

// Texts returns the array literal of s.
func Texts(s []string) string {
	n := 2
	for _, v := range s {
		n += len(v) + 3
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, v := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(v); j++ {
			if c := v[j]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// Ints returns the array literal of s.
func Ints(s []int64) string {
	buf := make([]byte, 0, 2+len(s)*4)
	buf = append(buf, '{')
	for i, v := range s {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, v, 10)
	}
	return string(append(buf, '}'))
}

// Times returns the array literal of s, each time in UTC to the
// microsecond, PostgreSQL's precision (finer digits are dropped, as pgx
// drops them). ok is false when a time lies outside the years 1 to 9999,
// which the literal does not spell: pass s itself then.
func Times(s []time.Time) (lit string, ok bool) {
	const layout = "2006-01-02 15:04:05.000000Z07:00"
	buf := make([]byte, 0, 2+len(s)*(len(layout)+3))
	buf = append(buf, '{')
	for i, v := range s {
		v = v.UTC()
		if y := v.Year(); y < 1 || y > 9999 {
			return "", false
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = v.AppendFormat(buf, layout)
		buf = append(buf, '"')
	}
	return string(append(buf, '}')), true
}
