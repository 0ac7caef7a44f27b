package jobguard

import (
	"context"
	"fmt"

	"github.com/jobguard/jobguard/internal/ident"
)

// Unstarted counts, in one statement, the PROCESSING jobs whose started-at
// column is NULL: jobs Overdue never returns, so that a reclaimer reading
// the table itself can never reclaim them, and counts them instead. A row
// gets its start from StartGuard.Start; one without it was moved to
// PROCESSING some other way.
//
// It reads one index range per job type, given an index on (type,
// started_at) over the active statuses (the bundled migration's): the
// types are found by a loose scan, as ActiveTypes finds them, and each
// type's rows without a start are one range of that index, so the count
// costs what those rows cost, not what the running jobs do. The table needs
// a started-at column (ErrNoStartedAt).
func (b *Batch) Unstarted(ctx context.Context, db DB) (int, error) {
	g := b.g
	if g.batch.unstarted == "" {
		return 0, fmt.Errorf("jobguard: unstarted: %w", ErrNoStartedAt)
	}
	var n int64
	if err := db.QueryRow(ctx, g.batch.unstarted).Scan(&n); err != nil {
		return 0, fmt.Errorf("jobguard: unstarted: %w", err)
	}
	return int(n), nil
}

// buildUnstarted is Unstarted's statement. The statuses are literals, as
// the bundled migration's partial index names them, and the type and start
// columns are compared bare, so that index serves every probe: the loose
// scan of the active types (in the type column's own type, so an enum needs
// no cast), one range per type of its rows with a NULL start, and one for
// the rows with no type at all.
func buildUnstarted(t Table) string {
	tbl := t.QualifiedName()
	col := func(name string) string { return "t." + ident.Quote(name) }
	status, started := col(t.StatusColumn), col(t.StartedAtColumn)
	processing := ident.Literal(t.Statuses.Processing)
	unstarted := fmt.Sprintf("%s = %s AND %s IS NULL", status, processing, started)
	if t.TypeColumn == "" {
		return fmt.Sprintf(`SELECT count(*)::int8 FROM %s AS t WHERE %s`, tbl, unstarted)
	}
	active := fmt.Sprintf("%s IN (%s, %s)", status, ident.Literal(t.Statuses.Queued), processing)
	typ := col(t.TypeColumn)
	return fmt.Sprintf(`WITH RECURSIVE k(type) AS (`+
		`(SELECT %[1]s FROM %[2]s AS t WHERE %[3]s AND %[1]s IS NOT NULL ORDER BY %[1]s LIMIT 1)`+
		` UNION ALL SELECT (SELECT %[1]s FROM %[2]s AS t WHERE %[3]s AND %[1]s > k.type ORDER BY %[1]s LIMIT 1)`+
		` FROM k WHERE k.type IS NOT NULL)`+
		` SELECT ((SELECT count(*) FROM %[2]s AS t WHERE %[1]s IS NULL AND %[4]s)`+
		` + coalesce((SELECT sum(c.n) FROM k CROSS JOIN LATERAL`+
		` (SELECT count(*) AS n FROM %[2]s AS t WHERE %[1]s = k.type AND %[4]s) AS c WHERE k.type IS NOT NULL), 0))::int8`,
		typ, tbl, active, unstarted)
}
