package jobset

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/internal/pgvalue"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
)

// ErrNoOwner is returned by Orphans when the table maps no OwnerColumn or
// no GenerationColumn: the rescue needs the one to know a job's process,
// and the other to fence its old execution out.
var ErrNoOwner = errors.New("jobguard: the table maps no OwnerColumn and GenerationColumn")

// Orphan is a running job whose owner's lease is not live: the process
// that ran it died, was stopped, or lost its path to the database.
type Orphan struct {
	// ID is the id column as text (uuids in their canonical form).
	ID string
	// Type is the type column as text; "" when the table has none.
	Type string
	// Generation is the execution's generation as read; after a rescue,
	// the generation that lost the job (the row has the next one).
	Generation int64
	// Owner is the lease id in the owner column as read.
	Owner string
}

// Orphans reads and rescues the running jobs of one table whose owner's
// lease (package lease) is not live. Build it once with Set.Orphans; it is
// safe for concurrent use.
type Orphans struct {
	guard *jobguard.Guard
	sql   guardlink.OrphanStatements
}

// Orphans builds the rescue's statements over the workers table w. It
// does no I/O. It returns an error wrapping ErrNoOwner when the table
// maps no owner or no generation.
func (s *Set) Orphans(w lease.Workers) (*Orphans, error) {
	if s.sql.Orphans == nil {
		return nil, fmt.Errorf("jobguard: orphans: %w", ErrNoOwner)
	}
	sql, err := s.sql.Orphans(w.Live, w.DeadLocked)
	if err != nil {
		return nil, fmt.Errorf("jobguard: orphans: %w", err)
	}
	return &Orphans{guard: s.guard, sql: sql}, nil
}

// Read returns up to limit PROCESSING jobs whose owner is set and whose
// owner's lease is not live on the database's clock, ordered by id, after
// the id after ("" for the first page). A job with no owner is never
// returned: no process claims it, and its type's limit judges it.
func (o *Orphans) Read(ctx context.Context, db jobguard.DB, after string, limit int) ([]Orphan, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("jobguard: orphans: limit %d is not positive", limit)
	}
	var from any // NULL: the first page
	if after != "" {
		id, err := o.guard.CanonicalID(after)
		if err != nil {
			return nil, fmt.Errorf("jobguard: orphans: after: %w", err)
		}
		from = id
	}
	rows, err := db.Query(ctx, o.sql.Read, limit, from)
	if err != nil {
		return nil, fmt.Errorf("jobguard: orphans: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Orphan, error) {
		var j Orphan
		err := r.Scan(&j.ID, &j.Generation, &j.Owner, &j.Type)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("jobguard: orphans: %w", err)
	}
	return out, nil
}

// RescueResult is what Rescue did with the jobs it was given.
type RescueResult struct {
	// Rescued are the jobs sent back to QUEUED, each with the generation
	// that lost the job (the row now has the next one).
	Rescued []Orphan
	// Moved counts jobs whose row no longer ran the execution read (it
	// finished, was started again, was reclaimed), or whose owner's lease
	// is live again: left alone.
	Moved int
	// Locked counts jobs whose row another transaction held (or that was
	// deleted meanwhile): skipped without waiting.
	Locked int
}

// Rescue sends back to QUEUED, in one conditional statement, every job of
// orphans whose row still runs the execution read (PROCESSING, the same
// generation and owner) and whose owner's lease is still not live on the
// database's clock: a new generation, no owner, no start, the failure
// reason reason (Shared.RescuedReason, which the start guard does not
// refuse). A row another transaction holds is skipped, never waited for.
// The job is not failed: no marker, no parent rule.
func (o *Orphans) Rescue(ctx context.Context, db jobguard.DB, orphans []Orphan, reason string) (RescueResult, error) {
	if len(orphans) == 0 {
		return RescueResult{}, nil
	}
	seen := make(map[string]bool, len(orphans))
	ids := make([]string, 0, len(orphans))
	gens := make([]int64, 0, len(orphans))
	owners := make([]string, 0, len(orphans))
	for _, j := range orphans {
		id, err := o.guard.CanonicalID(j.ID)
		if err != nil {
			return RescueResult{}, fmt.Errorf("jobguard: rescue: %w", err)
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		ids, gens, owners = append(ids, id), append(gens, j.Generation), append(owners, j.Owner)
	}
	rows, err := db.Query(ctx, o.sql.Rescue, pgvalue.StorableText(reason), pgarray.Of(ids), pgarray.Of(gens), pgarray.Of(owners))
	if err != nil {
		return RescueResult{}, fmt.Errorf("jobguard: rescue: %w", err)
	}
	owner := make(map[string]string, len(ids))
	for i, id := range ids {
		owner[id] = owners[i]
	}
	var res RescueResult
	var id *string
	var typ string
	var gen int64
	locked := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &gen, &typ}, func() error {
		if id == nil { // the count of the rows locked
			locked = int(gen)
			return nil
		}
		res.Rescued = append(res.Rescued, Orphan{ID: *id, Type: typ, Generation: gen, Owner: owner[*id]})
		return nil
	})
	if err != nil {
		return RescueResult{}, fmt.Errorf("jobguard: rescue: %w", err)
	}
	res.Moved = locked - len(res.Rescued)
	res.Locked = len(ids) - locked
	return res, nil
}
