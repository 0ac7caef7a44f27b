package reclaim

import (
	"time"

	"github.com/jobguard/jobguard/internal/interval"
)

// RunningSQL is the statement of s.CountRunning, for a test that pins its
// plan.
func RunningSQL(s *TableSource) string { return s.running }

// SetElapsedClock replaces the clock r reads the time elapsed between two
// sweeps with, so that a test can make the database's clock seem to jump.
func SetElapsedClock(r *Reclaimer, now func() time.Time) { r.elapsed = now }

// BudgetSQL is the statement that sets the opening batch's count budget.
const BudgetSQL = budgetSQL

// SetCountBudget sets how long r's count of the jobs without a start may
// run in the opening batch, so that a test that counts round trips is not
// at the mercy of a loaded machine.
func SetCountBudget(r *Reclaimer, d time.Duration) { r.budget = d }

// BudgetArg is the statement timeout, in milliseconds, r's opening batch
// gives its count.
func BudgetArg(r *Reclaimer) string { return interval.Millis(r.countBudget()) }
