package compensate

import (
	"time"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/retain"
)

// RetainAgeDefault is how long a finished artifact is kept after its last
// change, by the retention rule (Retention).
const RetainAgeDefault = 30 * 24 * time.Hour

// Retention is the retention rule of the artifacts of the Guard's jobs
// table, dated by changed_at, the database's clock at their last change
// (MigrationFiles, 0004). Once older than the age, it removes:
//
//   - a done artifact with no recheck to come: compensated for good. Were
//     its execution to record it again, Record would find no row and write
//     a pending one, which the sweep owes and compensates, as it would have
//     the done one.
//   - a kept artifact, when no artifact of the same kind and ref, of any
//     execution or jobs table, is open: pending, owed, or compensated with
//     a recheck to come. A kept artifact is never acted on itself (its
//     execution completed); its one use is to spare the thing it names
//     from another execution's compensation, and while another artifact of
//     that thing is open the sweep may still compensate it, so it stays;
//     a done one counts as open, since a late Record or a rejected
//     Finalize of its execution makes it owed again, and the kept one goes
//     at the sweep after the last of them.
//     What it cannot cover: a lost execution that records the very same
//     ref for the first time more than the age after the kept one
//     finished would no longer be spared. Refs of each execution's own
//     (the generation in a path), which the package doc recommends, never
//     meet that case.
//
// A pending or owed artifact, and a done one whose recheck is to come, are
// never removed: a sweep will act on them.
//
// The rule reads job_artifacts_finished_idx, and job_artifacts_held_idx and
// job_artifacts_open_ref_idx for the open artifacts of a kept one's thing.
// Run it with package retain.
func (a *Artifacts) Retention() retain.Rule {
	art := ident.Quote(a.cfg.Schema, a.cfg.Table)
	// OFFSET 0 keeps each probe a lookup by (kind, ref) for the one kept
	// artifact at hand: without it the planner may hash every open
	// artifact of the table once per batch.
	open := `NOT EXISTS (SELECT 1 FROM ` + art + ` o WHERE o.kind = r.kind AND o.ref = r.ref AND o.state = 'pending' OFFSET 0)` +
		` AND NOT EXISTS (SELECT 1 FROM ` + art + ` o WHERE o.kind = r.kind AND o.ref = r.ref` +
		` AND (o.state IN ('rejected', 'done') OR o.recheck_at IS NOT NULL) OFFSET 0)`
	finished := `r.jobs_table = ` + ident.Literal(a.cfg.Guard.TableKey()) + ` AND r.state IN ('kept', 'done')` +
		` AND (r.state = 'done' AND r.recheck_at IS NULL OR r.state = 'kept' AND ` + open + `)`
	return retain.NewRule(TableDefault, art, "changed_at", finished, RetainAgeDefault)
}
