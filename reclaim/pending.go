package reclaim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// ReleaseBrake releases the brake for the next sweep of r (or plan): it
// reclaims every job it decides to, whatever the caps and the clocks. The
// sweeps after it brake again. For an operator who has looked at a braked
// sweep's jobs and wants them reclaimed at once rather than a cap at a
// time.
func (r *Reclaimer) ReleaseBrake() { r.released.Store(true) }

// candidate is a job a pass decided to reclaim, held until the pass has
// seen every page and the brake has had its say.
type candidate struct {
	job  ActiveJob // with its Row
	rule rule
}

// clocks is a reading of the two clocks a sweep compares: the database's
// (a row's ReadAt) and the reclaimer's monotonic clock (time.Now, not
// Config.Now: a step of the reclaimer's wall clock is not the evidence's
// fault) at the same moment, give or take a query.
type clocks struct {
	mu       sync.Mutex
	db, wall time.Time
}

// drift returns how far the two clocks moved apart between the reading
// last kept and now's (zero for the first), and keeps now's. A reading
// without a database time (a pass that read no row) keeps the last.
func (c *clocks) drift(db, wall time.Time) time.Duration {
	if db.IsZero() {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var d time.Duration
	if !c.db.IsZero() {
		d = db.Sub(c.db) - wall.Sub(c.wall)
	}
	c.db, c.wall = db, wall
	return d
}

// hold keeps what a page decided to reclaim for the end of the pass, and
// the clocks of the page's rows.
func (r *Reclaimer) hold(p *pass, l ActiveJob, rl rule) {
	p.pending = append(p.pending, candidate{job: l, rule: rl})
}

// drift is how far the database's clock moved apart from the reclaimer's
// since the last sweep, read once a pass, from the pass's first reading
// (the rescue's, or the pages' rows'). A plan neither reads nor moves the
// sweeps' clocks: zero.
func (r *Reclaimer) drift(p *pass) time.Duration {
	if p.plan != nil {
		return 0
	}
	if !p.drifted {
		p.drift, p.drifted = r.clock.drift(p.dbAt, p.wallAt), true
	}
	return p.drift
}

// braked notes why the brake held jobs of the pass back; a reason the
// pass has already is not told twice.
func (p *pass) braked(why string) {
	switch {
	case p.rep.BrakeReason == "":
		p.rep.BrakeReason = why
	case why != "" && why != p.rep.BrakeReason:
		p.rep.BrakeReason += "; " + why
	}
}

// readClocks notes the database's clock of the rows of jobs beside the
// reclaimer's, now.
func (p *pass) readClocks(jobs []ActiveJob, now time.Time) {
	for _, l := range jobs {
		if l.Row != nil && l.Row.ReadAt.After(p.dbAt) {
			p.dbAt, p.wallAt = l.Row.ReadAt, now
		}
	}
}

// reclaimHeld applies the brake to what the pass decided to reclaim, then
// writes (or, for a dry pass, counts) the jobs it lets through, stalled
// longest first, a page at a time, and counts the others as braked.
func (r *Reclaimer) reclaimHeld(ctx context.Context, p *pass) error {
	in := brakeInput{wanted: map[string]int{}, released: p.released, clockDrift: r.drift(p)}
	if len(p.pending) == 0 {
		return nil
	}
	for _, c := range p.pending {
		in.wanted[c.job.Type]++
	}
	var countErr error
	if !in.released && r.cfg.Brake.needsRunning(in.wanted) {
		running, err := r.countRunning(ctx, p)
		if err != nil {
			// Without the count the brake takes the jobs it would reclaim
			// for every running job, the strictest reading: the sweep still
			// reclaims up to the caps, and fails with the count's error.
			countErr = fmt.Errorf("count the running jobs for the brake (braked as if only the stalled ran): %w", err)
		}
		in.running = running
	}
	v := brakeRule(r.cfg.Brake, in)
	slices.SortFunc(p.pending, func(a, b candidate) int {
		return cmp.Or(a.job.Row.UpdatedAt.Compare(b.job.Row.UpdatedAt), cmp.Compare(a.job.ID, b.job.ID))
	})
	var kept []candidate
	taken := map[string]int{}
	for _, c := range p.pending {
		if taken[c.job.Type] >= v.perType[c.job.Type] || len(kept) >= v.total {
			p.rep.Braked++
			if r.debug(ctx) {
				r.log.DebugContext(ctx, "reclaim: brake: job held back", slog.String("job_id", c.job.ID),
					slog.String("job_type", c.job.Type))
			}
			continue
		}
		taken[c.job.Type]++
		kept = append(kept, c)
	}
	if len(kept) < len(p.pending) {
		p.braked(v.reason)
		p.markBraked(kept)
	}
	p.pending = nil
	if p.dry {
		for _, c := range kept {
			r.wouldReclaim(ctx, p, c.job, c.rule)
		}
		return countErr
	}
	for len(kept) > 0 {
		n := min(len(kept), r.cfg.PageSize)
		if err := r.reclaim(ctx, p, kept[:n]); err != nil {
			return errors.Join(countErr, err)
		}
		kept = kept[n:]
	}
	return countErr
}

// countRunning is the number of running jobs of each type: the source's
// count when it is a RunningCounter, else its listings (a queue lists
// every running job).
func (r *Reclaimer) countRunning(ctx context.Context, p *pass) (map[string]int, error) {
	c, ok := r.cfg.Source.(RunningCounter)
	if !ok {
		return p.listed, nil
	}
	// The count belongs to the listing's time: the rest of the deadline
	// is the writes'.
	if !p.listUntil.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, p.listUntil)
		defer cancel()
	}
	var running map[string]int
	err := safe.Bounded(ctx, r.listGrace(), func(ctx context.Context) error {
		m, err := c.CountRunning(ctx)
		if err == nil {
			running = m
		}
		return err
	})
	return running, err
}

// reclaim fails the chosen jobs in one write, then announces and counts
// what committed, also when the write stopped part way, and when it
// failed without knowing whether its commit went through (see
// txstate.InDoubt): then the rows are read back, once the transaction
// that held them has ended, within afterCommitTimeout. The markers and notices go first,
// before any log line.
func (r *Reclaimer) reclaim(ctx context.Context, p *pass, batch []candidate) error {
	chosen := make([]jobset.Job, len(batch))
	typeOf := make(map[string]string, len(batch)) // id → the type its limit and parent rule are keyed by
	for i, c := range batch {
		chosen[i] = *c.job.Row
		typeOf[c.job.ID] = c.job.Type
	}
	out, err := r.write(ctx, p, chosen, typeOf)
	actx, cancel := afterCommit(ctx)
	defer cancel()
	if err != nil {
		err = fmt.Errorf("write: %w", err)
	}
	if txstate.InDoubt(err) {
		// The write may have committed unheard: what the rows say it did
		// is announced and counted as if it had been heard.
		settled, serr := r.settleReclaims(actx, chosen, out.failed)
		out.failed = append(out.failed, settled...)
		if serr != nil {
			err = errors.Join(err, fmt.Errorf("read back the jobs whose reclaim is in doubt: %w", serr))
		}
	}
	r.announce(actx, out.failed, &p.rep, &p.notes)
	r.tally(ctx, &p.rep, &p.notes, out, typeOf)
	return err
}

// markBraked marks the jobs of a plan that were decided for reclaim, in a
// type that reclaims, and are not among kept.
func (p *pass) markBraked(kept []candidate) {
	if p.plan == nil {
		return
	}
	through := make(map[string]bool, len(kept))
	for _, c := range kept {
		through[c.job.ID] = true
	}
	for i, j := range *p.plan {
		if j.Decision == DecisionReclaim && j.Mode == ModeReclaim && !through[j.ID] {
			(*p.plan)[i].Braked = true
		}
	}
}
