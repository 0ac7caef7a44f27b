package reclaim

import "time"

// RunningSQL is the statement of s.CountRunning, for a test that pins its
// plan.
func RunningSQL(s *TableSource) string { return s.running }

// SetElapsedClock replaces the clock r reads the time elapsed between two
// sweeps with, so that a test can make the database's clock seem to jump.
func SetElapsedClock(r *Reclaimer, now func() time.Time) { r.elapsed = now }

// BudgetSQL is the statement that sets the opening batch's count budget.
const BudgetSQL = budgetSQL
