package settle

import (
	"time"

	"github.com/jobguard/jobguard/internal/interval"
)

// policy is the rule for a record the sweep has taken: how many attempts
// it gets and how long it waits between them.
type policy struct {
	maxAttempts            int
	backoffMin, backoffMax time.Duration
}

// outcome is what one attempt on a record came to.
type outcome int

const (
	// settled: every update succeeded and the record was confirmed and
	// billed (by this attempt, or by another finalize that got there
	// first).
	settled outcome = iota
	// failed: an update, the billing or the database failed, or the record
	// names a handler this process has not registered. Trying again may
	// help.
	failed
	// notCompleted: the job is not COMPLETED at the record's generation (it
	// was deleted, or moved by hand). Trying again cannot help.
	notCompleted
	// exhausted: the record was taken for an attempt beyond MaxAttempts (a
	// sweep died during its last one). Nothing was run.
	exhausted
)

// verdict is what becomes of a record after an attempt.
type verdict struct {
	// giveUp moves the record to given_up: never billed, an operator's to
	// decide.
	giveUp bool
	// retryIn is when the sweep may take the record again, when it is
	// neither settled nor given up.
	retryIn time.Duration
}

// runs reports whether attempt (counted from 1) may run at all.
func (p policy) runs(attempt int) bool { return attempt <= p.maxAttempts }

// after decides what becomes of a record whose attempt (counted from 1)
// came to o.
func (p policy) after(attempt int, o outcome) verdict {
	switch o {
	case settled:
		return verdict{}
	case notCompleted, exhausted:
		return verdict{giveUp: true}
	}
	if attempt >= p.maxAttempts {
		return verdict{giveUp: true}
	}
	return verdict{retryIn: p.backoff(attempt)}
}

// backoff is the pause after failed attempt n (counted from 1): backoffMin,
// doubled for every attempt after the first, at most backoffMax.
func (p policy) backoff(n int) time.Duration {
	d := p.backoffMin
	for i := 1; i < n && d < p.backoffMax; i++ {
		d = interval.Sum(d, d) // saturates: a long BackoffMax never wraps
	}
	return min(d, p.backoffMax)
}
