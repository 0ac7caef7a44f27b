package jobguard

import (
	"errors"
	"fmt"
)

// Owner is the worker process an execution runs in, as the start guard
// records it (StartGuardConfig.Owner): package lease's *Lease satisfies
// it, and jobguard needs nothing else of it.
type Owner interface {
	// ID names the process start; it is what the jobs table's OwnerColumn
	// holds while the process runs the job.
	ID() string
	// Err is nil while the process holds its lease, and why the lease
	// ended once it has.
	Err() error
}

// checkOwned says why t cannot record an owner, or nil: the owner needs
// its column, and a rescue needs the generation that fences the old
// execution out.
func checkOwned(g *Guard, owner Owner) error {
	t := g.table
	switch {
	case t.OwnerColumn == "":
		return errors.New("the table maps no OwnerColumn to record it in")
	case t.GenerationColumn == "":
		return errors.New("the table maps no GenerationColumn: a rescued job's old execution could not be fenced out")
	}
	// The rescue compares the column with the lease's id: one the column
	// cannot store as it is would make a live worker's job look orphaned,
	// or fail every Start.
	if id, col := owner.ID(), g.cat.columns[t.OwnerColumn]; !col.holds(id) || !col.keeps(id) {
		return fmt.Errorf("column %q (OwnerColumn) of %s is %s: it cannot store the lease id %q as it is: %w",
			t.OwnerColumn, t.QualifiedName(), col.full, id, ErrUnstorable)
	}
	return nil
}

// ownerLost refuses a start under a lease that has ended, before any
// write.
func (s *StartGuard) ownerLost(jobID string) error {
	if s.owner == nil {
		return nil
	}
	if err := s.owner.Err(); err != nil {
		return fmt.Errorf("jobguard: start: job %s: %w: %w", jobID, ErrOwnerLost, err)
	}
	return nil
}

// ownerID is the owner Start writes: the lease's id, or NULL without one.
func (s *StartGuard) ownerID() any {
	if s.owner == nil {
		return nil
	}
	return s.owner.ID()
}
