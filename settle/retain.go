package settle

import (
	"time"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/retain"
)

// RetainAgeDefault is how long a settled record is kept after it settled,
// by the retention rule (Retention).
const RetainAgeDefault = 30 * 24 * time.Hour

// Retention is the retention rule of the Settler's records: a record of its
// Guard's jobs table that is settled (confirmed or given up) is removed
// once its settled_at, stamped on the database's clock when it settled, is
// older than the age. A pending record is never removed: the sweep still
// owes it updates or billing. Nothing reads a settled record again: every
// write is conditional on a pending record, and a job completes once per
// generation, so no record of the same execution is written after it. A
// given-up record removed can no longer be reopened (Reopen): give
// Retention an age longer than an operator takes to look.
//
// The rule reads job_settlements_settled_idx (MigrationFiles, 0005). Run
// it with package retain.
func (s *Settler) Retention() retain.Rule { return s.retention }

// retentionRule is the rule over the records table tbl for the jobs table
// whose Guard.TableKey is jobs. The predicate is the settled index's,
// written as it is, and the jobs table its first column.
func retentionRule(tbl, jobs string) retain.Rule {
	return retain.NewRule(TableDefault, tbl, "settled_at",
		`r.jobs_table = `+ident.Literal(jobs)+` AND r.state IN ('confirmed', 'given_up')`, RetainAgeDefault)
}
