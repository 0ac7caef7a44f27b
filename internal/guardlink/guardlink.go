// Package guardlink hands package jobset the statements that package
// jobguard builds from its catalog, without putting them in jobguard's API.
//
// Package jobguard sets SetOf in an init; package jobset calls it. Neither
// imports the other through this package, so the link has no cycle, and
// no caller outside the module can reach it.
package guardlink

// SetStatements are the set-oriented statements of one guard, built once
// by jobguard.New from the validated mapping. Each one's parameters are
// documented where jobguard builds it. An empty statement is one the
// table cannot support (no type column, no started-at column).
type SetStatements struct {
	Snapshot     string // $1 ids → rows
	Settled      string // Snapshot's, waiting for the rows' writers to end (FOR SHARE)
	Types        string // → the distinct types of the active jobs
	Finished     string // → the distinct types of the finished jobs
	Overdue      string // $1 types, $2 limits (µs), $3 page size → rows
	OverdueAfter string // Overdue's, and $4 the last id of the previous page
	History      string // $1 types, $2 limits, $3 window, $4 per type, $5 percentile, $6 reclaimed reason
	Unstarted    string // → the count
	Fail         string // $1 failed, $2 reason, $3 ids, $4 statuses, $5 updated_at, $6 generations
	// FailWith is Fail with a write alongside (an Alongside's SQL(7)), as a
	// data-modifying CTE that reads u(id, generation): the rows the
	// statement failed, id in the id column's type and generation as
	// written (0 on a table without generations).
	FailWith func(write string) string
	// Orphans builds the rescue's statements around live, the predicate
	// "the lease of the owner expression is live" (package lease's
	// Workers.Live); nil when the table maps no owner or no generation.
	Orphans func(live, deadLocked func(owner string) (string, error)) (OrphanStatements, error)
}

// OrphanStatements read and rescue the running jobs whose owner's lease
// is not live.
type OrphanStatements struct {
	Read   string // $1 page size, $2 the last id of the previous page or NULL → id, generation, owner, type
	Rescue string // $1 reason, $2 ids, $3 generations, $4 owners → id, old generation, type; then NULL, rows locked, ''
}

// SetOf returns the statements of guard, a *jobguard.Guard. Package
// jobguard sets it in an init.
var SetOf func(guard any) SetStatements

// Alongside is a write that travels in another package's statement, as a
// data-modifying CTE that reads the rows that statement changed, so that
// it commits exactly with them. Package settle writes its record in a
// finalize's conditional completion, which becomes
//
//	WITH completed AS (<the completion> RETURNING 1) <SQL(first)>
//
// so the write sees exactly the rows the completion changed: none when
// the completion is refused. There SQL must write one row per row of
// completed, so that the statement's row count is the completion's, which
// jobguard judges as it judges the completion alone. Package marker
// writes the reclaim markers in a reclaim's write (SetStatements.FailWith),
// reading u.
type Alongside struct {
	// SQL is the write, reading the statement's rows, with its parameters
	// numbered from first (the statement's own come before them).
	SQL func(first int) string
	// Args are its parameters.
	Args []any
}

// MarkersAlongside returns the write of the reclaim markers of the jobs a
// reclaim's statement fails (SetStatements.FailWith), in store, a
// *marker.PostgresStore, with reason, and the key of the jobs table whose
// markers store keeps. Package marker sets it in an init.
var MarkersAlongside func(store any, reason string) (a Alongside, tableKey string)

// FinalizeAlongside returns spec, a jobguard.FinalizeSpec, whose
// completion carries a in its statement. Package jobguard sets it in an
// init.
var FinalizeAlongside func(spec any, a Alongside) any
