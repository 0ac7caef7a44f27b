package reclaim

import (
	"context"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard"
)

// opening is what a sweep over the jobs table reads before its first
// page, in one round trip: the limits and modes (when they are a
// TableLimits on the source's handle), the active types, and the count of
// the running jobs without a start when it is quick. A server answers a
// batch whole, so a slow count would hold the limits and the types back
// and take the listing's time: the count in the batch runs under a
// statement timeout of its budget (countBudget), and one that runs out (or
// fails) is read again after the reclaims, with the sweep's time.
//
// A failed batch costs more than its round trip: pgx drops every
// statement of it from the connection's caches, to be prepared again. So
// a count that ran out of its budget once stays out of the batch, read
// after the reclaims, until it takes under half the budget there
// (Reclaimer.countApart): a count that stays slow costs its one round
// trip a sweep, as it did before it joined the batch, and one near the
// budget does not go in and out at every sweep.
type opening struct {
	// limits and modes are nil when the limits were not read with the rest.
	limits map[string]time.Duration
	modes  map[string]Mode
	types  []string
	// unstarted is the count, when counted.
	unstarted int
	counted   bool
}

// defaultCountBudget is how long the count in the opening batch may run
// (the session's statement timeout when that is shorter): the longest a
// slow count holds back the limits, the types and so the listing.
const defaultCountBudget = 50 * time.Millisecond

// countBudget is the count's budget for r's sweeps: r.budget, at most a
// tenth of the sweep's deadline.
func (r *Reclaimer) countBudget() time.Duration { return min(r.budget, r.cfg.SweepTimeout/10) }

// budgetSQL sets the statement timeout to $1 milliseconds (as
// interval.Millis renders a duration: at least 1, as 0 turns the timeout
// off), or keeps the session's when that is shorter, until the batch's
// implicit transaction ends: the statements queued after it run under it,
// and the session's own comes back with the batch's end.
const budgetSQL = `SELECT set_config('statement_timeout',` +
	` (CASE WHEN s.ms > 0 AND s.ms < $1::int8 THEN s.ms ELSE $1::int8 END)::text, true)` +
	` FROM (SELECT ceil(extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)::int8 AS ms) AS s`

// batcher is a handle that sends batches: a pool, a connection, a pgx.Tx.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// openTable reads what src's sweep needs before its first page as one
// batch: the reads have no data between them, so the round trips of the
// limits, the types and the count become one. The count is read last,
// under its budget, so that its failure leaves the others read.
//
// It reports false, having read nothing the sweep uses, when the handle
// cannot send a batch or is inside a transaction (a failed read would
// abort the caller's transaction before the listing), and when the limits
// or the types fail to read: the sweep then reads them one at a time, as
// it always could, so an error reads as it always did (a limits table
// without the mode column, read again without it, included).
func (r *Reclaimer) openTable(ctx context.Context, src *TableSource, withLimits bool) (*opening, bool) {
	sb, ok := src.db.(batcher)
	if !ok || txstate.Of(src.db) != txstate.Own {
		return nil, false
	}
	sql := guardlink.SetOf(src.guard)
	var b pgx.Batch
	if withLimits {
		b.Queue(r.cfg.Limits.(*TableLimits).withMode)
	}
	if sql.Types != "" {
		b.Queue(sql.Types)
	}
	withCount := sql.Unstarted != "" && !r.countApart.Load()
	if withCount {
		b.Queue(budgetSQL, interval.Millis(r.countBudget()))
		b.Queue(sql.Unstarted)
	}
	br := sb.SendBatch(ctx, &b)
	o, ok := readOpening(br, withLimits, sql.Types != "", withCount)
	cerr := br.Close()
	if withCount && ok && !o.counted {
		// The count itself failed, the limits and the types read: a batch
		// that failed before the count says nothing of it.
		r.countApart.Store(true)
	}
	if !ok {
		return nil, false
	}
	if cerr != nil && (!withCount || o.counted) {
		// An error of the batch that is not the count's.
		return nil, false
	}
	if withLimits {
		limits, modes, err := vetLimits(o.limits, o.modes)
		if err != nil {
			return nil, false
		}
		o.limits, o.modes = limits, modes
	}
	return o, true
}

// limitsWith reports whether the limits can travel in src's batch: a
// TableLimits on src's own handle.
func (r *Reclaimer) limitsWith(src *TableSource) bool {
	tl, ok := r.cfg.Limits.(*TableLimits)
	return ok && sameHandle(tl.db, src.db)
}

// readOpening reads openTable's batch in the order it was queued.
func readOpening(br pgx.BatchResults, withLimits, withTypes, withCount bool) (*opening, bool) {
	o := &opening{types: []string{""}}
	if withLimits {
		rows, err := br.Query()
		if err != nil {
			return nil, false
		}
		if o.limits, o.modes, err = scanLimits(rows, true); err != nil {
			return nil, false
		}
	}
	if withTypes {
		rows, err := br.Query()
		if err != nil {
			return nil, false
		}
		if o.types, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return nil, false
		}
	}
	if withCount {
		var n int64
		if _, err := br.Exec(); err == nil && br.QueryRow().Scan(&n) == nil {
			o.unstarted, o.counted = int(n), true
		}
	}
	return o, true
}

// sameHandle reports whether a and b are one handle, so that one batch
// reads what each would have read. Handles of a type that cannot be
// compared are taken for different ones.
func sameHandle(a, b jobguard.DB) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}
