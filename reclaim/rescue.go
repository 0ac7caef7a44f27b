package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// rescue sends back to QUEUED the running jobs whose owner's lease is not
// live (Config.Workers), a page at a time: it reads them, writes them in
// one conditional statement, and publishes a notice for each execution
// that lost its job, so that a watcher in a process that comes back
// cancels it. A shadow pass or a Plan reads and counts them only. The
// job is not failed: no marker, no parent rule.
func (r *Reclaimer) rescue(ctx context.Context, p *pass) error {
	if r.orphans == nil {
		return nil
	}
	held, err := r.rescueHeld(ctx, p)
	if err != nil {
		return fmt.Errorf("rescue: %w", err)
	}
	for after := ""; ; {
		page, err := r.orphans.Read(ctx, r.cfg.DB, after, r.cfg.PageSize)
		if err != nil {
			return fmt.Errorf("rescue: %w", err)
		}
		if len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].ID
		if held != "" {
			p.rep.Braked += len(page)
			p.braked(held)
			for _, j := range page {
				r.log.DebugContext(ctx, "reclaim: brake: rescue held back", slog.String("job_id", j.ID),
					slog.String("job_type", j.Type), slog.String("lease_id", j.Owner))
			}
		} else if p.dry {
			r.wouldRescue(ctx, p, page)
		} else if err := r.rescuePage(ctx, p, page); err != nil {
			return fmt.Errorf("rescue: %w", err)
		}
		if len(page) < r.cfg.PageSize {
			return nil
		}
	}
}

// rescueHeld reads the database's clock for the pass, and says why the
// brake holds the pass's rescues back, or "": a lease is live while its
// expiry is ahead of that clock, so a jump of it makes live workers look
// dead, and the rescue waits for a sweep whose clocks agree. The brake's
// caps on a sweep's count do not hold rescues: a rescue fails nothing, and
// the job goes back for another attempt the start guard judges.
func (r *Reclaimer) rescueHeld(ctx context.Context, p *pass) (string, error) {
	if p.plan != nil || p.released {
		return "", nil
	}
	var now time.Time
	if err := r.cfg.DB.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&now); err != nil {
		return "", fmt.Errorf("read the database's clock: %w", err)
	}
	if now.After(p.dbAt) {
		p.dbAt, p.wallAt = now, r.elapsed()
	}
	return r.cfg.Brake.clockJumped(r.drift(p)), nil
}

// rescuePage writes one page of orphans and announces what committed, also
// when the write failed without knowing whether it committed (see
// txstate.InDoubt): then the rows are read back, and its error is still
// returned.
func (r *Reclaimer) rescuePage(ctx context.Context, p *pass, page []jobset.Orphan) error {
	res, err := r.orphans.Rescue(ctx, r.cfg.DB, page, r.cfg.Guard.Shared().RescuedReason)
	// What committed is announced even if the sweep's context has ended,
	// as a reclaim is.
	actx, cancel := afterCommit(ctx)
	defer cancel()
	var notify []jobset.Orphan
	if err != nil {
		if !txstate.InDoubt(err) {
			return err
		}
		// The write may have committed unheard: the rows say what it did.
		var lost []jobset.Orphan
		var serr error
		lost, res.Rescued, serr = r.settleRescues(actx, page)
		if serr != nil {
			err = errors.Join(err, fmt.Errorf("read back the jobs whose rescue is in doubt: %w", serr))
		}
		// Every execution that lost its job is told, whoever moved the
		// row on; only the rescue's own count as rescued.
		notify = lost
	} else {
		notify = res.Rescued
	}
	p.rep.Rescued += len(res.Rescued)
	p.rep.LostRace += res.Moved
	p.rep.Locked += res.Locked
	execs := make([]jobguard.Execution, len(notify))
	for i, j := range notify {
		execs[i] = jobguard.Execution{JobID: j.ID, Generation: j.Generation}
	}
	r.publish(actx, execs, &p.rep, &p.notes)
	debug := r.debug(ctx)
	for _, j := range res.Rescued {
		p.rep.RescuedIDs = append(p.rep.RescuedIDs, j.ID)
		if debug {
			r.log.DebugContext(ctx, "reclaim: job rescued: its worker's lease lapsed", slog.String("job_id", j.ID),
				slog.String("job_type", j.Type), slog.Int64("generation", j.Generation), slog.String("lease_id", j.Owner))
		}
	}
	return err
}

// wouldRescue counts, and logs or plans, the orphans a shadow pass or a
// Plan would rescue.
func (r *Reclaimer) wouldRescue(ctx context.Context, p *pass, page []jobset.Orphan) {
	p.rep.WouldRescue += len(page)
	for _, j := range page {
		if p.plan != nil {
			*p.plan = append(*p.plan, PlannedJob{ID: j.ID, Type: j.Type, Generation: j.Generation,
				Decision: DecisionRescue, NoProgress: r.cfg.NoProgress, Owner: j.Owner})
			continue
		}
		r.log.InfoContext(ctx, "reclaim: shadow: would rescue", "job_id", j.ID, "job_type", j.Type,
			"generation", j.Generation, "lease_id", j.Owner)
	}
}
