package settle

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobguard/jobguard/internal/safe"
)

// Report counts what one sweep did. Every record it took lands in exactly
// one of Settled, Raced, Retrying and GivenUp.
type Report struct {
	// Taken is the number of records the sweep took: pending and due.
	Taken int
	// Settled counts records this sweep confirmed and billed.
	Settled int
	// Raced counts records whose updates succeeded but that another
	// finalize or sweep had confirmed first (nothing was billed twice), and
	// attempts that outlived their lease: another sweep had claimed the
	// record since, and its verdict stands.
	Raced int
	// Retrying counts records whose attempt failed (an update, the
	// billing, an unregistered name, the database): they stay pending and
	// are taken again after their backoff. An attempt cut short by the
	// sweep's own context is handed back (it does not count towards
	// MaxAttempts) and counted here.
	Retrying int
	// GivenUp counts records moved to given_up: their last attempt failed,
	// or their job was not completed by their execution. They are never
	// billed; each is logged at warn.
	GivenUp int
	// Unregistered counts the attempts that failed because the record names
	// an update or a meter with no handler in this process (also counted
	// in Retrying or GivenUp).
	Unregistered int
	// Updates counts update handlers that succeeded.
	Updates int
	// Accrued counts ledger rows written.
	Accrued int
}

func (r *Report) add(a attemptResult) {
	r.Taken++
	switch a.result() {
	case "settled":
		r.Settled++
	case "raced":
		r.Raced++
	case "given_up":
		r.GivenUp++
	default:
		r.Retrying++
	}
	if a.unknown {
		r.Unregistered++
	}
	r.Updates += a.ran
	r.Accrued += a.accrued
}

// notes are what a sweep tells an operator beyond its counts: the first
// error of each kind.
type notes struct {
	retryErr, givenUpErr, writeErr error
	givenUpJob                     string
	// panicked is the first attempt's error that wraps a handler's or an
	// increment's panic, whose stack the summary logs.
	panicked error
}

func (n *notes) add(a attemptResult) {
	if n.panicked == nil && safe.AsPanic(a.err) != nil {
		n.panicked = a.err
	}
	switch {
	case a.writeErr != nil && n.writeErr == nil:
		n.writeErr = a.writeErr
	case a.outcome == settled:
	case a.verdict.giveUp && n.givenUpErr == nil:
		n.givenUpErr, n.givenUpJob = a.err, a.exec.JobID
	case !a.verdict.giveUp && n.retryErr == nil:
		n.retryErr = a.err
	}
}

// summarize logs the one line of a sweep: every counter, how long it took,
// and, at warn level, what needs an operator: records given up, names with
// no handler, the verdicts that could not be written, a handler or an
// increment that panicked (the first panic's value and stack), the sweep's
// own error. Failures that will be retried are at info, with the first one.
func (s *Settler) summarize(ctx context.Context, rep Report, n *notes, err error, took time.Duration) {
	attrs := []slog.Attr{
		slog.Int("taken", rep.Taken), slog.Int("settled", rep.Settled), slog.Int("raced", rep.Raced),
		slog.Int("retrying", rep.Retrying), slog.Int("given_up", rep.GivenUp),
		slog.Int("unregistered", rep.Unregistered), slog.Int("updates", rep.Updates),
		slog.Int("accrued", rep.Accrued), slog.Duration("took", took),
	}
	level := slog.LevelInfo
	if rep.GivenUp > 0 || rep.Unregistered > 0 || n.writeErr != nil || n.panicked != nil || err != nil {
		level = slog.LevelWarn
	}
	if n.givenUpJob != "" {
		attrs = append(attrs, slog.String("given_up_job_id", n.givenUpJob))
	}
	for _, e := range []struct {
		key string
		err error
	}{
		{"retry_error", n.retryErr}, {"given_up_error", n.givenUpErr}, {"write_error", n.writeErr}, {"error", err},
	} {
		if e.err != nil {
			attrs = append(attrs, slog.String(e.key, e.err.Error()))
		}
	}
	attrs = append(attrs, safe.Attrs(n.panicked)...)
	s.log.LogAttrs(ctx, level, "settle: sweep", attrs...)
}
