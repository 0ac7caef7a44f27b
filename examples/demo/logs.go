package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// record is one log line the libraries or the worker wrote.
type record struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logStore keeps every record of the run, so that the refusal invariant can
// look for the log line of each refusal.
type logStore struct {
	mu      sync.Mutex
	records []record
}

// find returns the records with msg whose job_id is jobID.
func (s *logStore) find(msg, jobID string) []record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []record
	for _, rec := range s.records {
		if rec.msg == msg && rec.attrs["job_id"] == jobID {
			out = append(out, rec)
		}
	}
	return out
}

// recorder is the demo's slog handler: it stores every record and prints
// the Info and higher ones (all of them when verbose) into the timeline.
type recorder struct {
	store   *logStore
	tl      *timeline
	verbose bool
	attrs   []slog.Attr
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	out := record{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	for _, a := range r.attrs {
		out.attrs[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool {
		out.attrs[a.Key] = a.Value.String()
		return true
	})
	r.store.mu.Lock()
	r.store.records = append(r.store.records, out)
	r.store.mu.Unlock()
	if rec.Level < slog.LevelInfo && !r.verbose {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "    log %-5s %s", rec.Level, rec.Message)
	for _, k := range []string{"job_id", "job_type", "generation", "parent_id"} {
		if v, ok := out.attrs[k]; ok && v != "" {
			fmt.Fprintf(&b, " %s=%s", k, short(v))
		}
	}
	if v, ok := out.attrs["error"]; ok && rec.Level >= slog.LevelWarn {
		fmt.Fprintf(&b, "\n            error: %s", v)
	}
	r.tl.say("%s", b.String())
	return nil
}

func (r *recorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *r
	c.attrs = append(slices.Clip(r.attrs), attrs...)
	return &c
}

func (r *recorder) WithGroup(string) slog.Handler { return r }

// short abbreviates a uuid to its first eight characters, the way the
// timeline names jobs.
func short(id string) string {
	if len(id) == 36 && strings.Count(id, "-") == 4 {
		return id[:8]
	}
	return id
}
