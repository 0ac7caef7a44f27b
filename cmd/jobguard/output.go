package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// printJSON writes v as indented JSON, one document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes rows under a header, in aligned columns, to w in one
// write: the redacting writer then sees a cell whole, a line break in it
// included.
type table struct {
	w   io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	_, err := t.w.Write(t.buf.Bytes())
	return err
}

// flush writes out what w holds of an unfinished line, when it holds one
// (a redacting writer does, until a newline ends it).
func flush(w io.Writer) {
	if f, ok := w.(interface{ Flush() error }); ok {
		_ = f.Flush()
	}
}

// dur prints a duration to the second (to the millisecond below one);
// zero prints as "-".
func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Second && d > -time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// limitText prints a limit; zero is "none".
func limitText(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

// seconds is a duration in seconds, as the JSON output writes durations.
func seconds(d time.Duration) float64 { return d.Seconds() }

// optSeconds is seconds, or nil (null) for zero: no limit, no start.
func optSeconds(d time.Duration) *float64 {
	if d == 0 {
		return nil
	}
	s := d.Seconds()
	return &s
}

// orDash prints s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
