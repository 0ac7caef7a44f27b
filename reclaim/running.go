package reclaim

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/jobguard"
)

// RunningCounter is a Source that can count the running jobs of each type
// cheaply, as TableSource can. A sweep asks it only when a share cap of
// its Brake could hold back what it decided to reclaim; a source that is
// not one is taken to list every running job (a queue's source does), and
// its listings per type are the count.
type RunningCounter interface {
	CountRunning(ctx context.Context) (map[string]int, error)
}

var _ RunningCounter = (*TableSource)(nil)

// CountRunning counts the PROCESSING rows of each type, in one statement
// that finds the active types by a loose scan of the bundled migration's
// partial index on the active jobs and counts one range of that index per
// type (the rows of a NULL type count as the type ""): the status is a
// literal and the type column is compared bare, so the index serves every
// probe, and the count costs what the running jobs of the types cost, not
// the whole table.
func (s *TableSource) CountRunning(ctx context.Context) (map[string]int, error) {
	rows, err := s.db.Query(ctx, s.running)
	if err != nil {
		return nil, fmt.Errorf("reclaim: table source: count running: %w", err)
	}
	out := map[string]int{}
	var typ string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&typ, &n}, func() error {
		if n > 0 {
			out[typ] += int(n)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reclaim: table source: count running: %w", err)
	}
	return out, nil
}

// buildRunning is CountRunning's statement over t.
func buildRunning(t jobguard.Table) string {
	tbl := t.QualifiedName()
	col := func(name string) string { return "t." + ident.Quote(name) }
	status := col(t.StatusColumn)
	running := fmt.Sprintf("%s = %s", status, ident.Literal(t.Statuses.Processing))
	if t.TypeColumn == "" {
		return fmt.Sprintf(`SELECT ''::text, count(*)::int8 FROM %s AS t WHERE %s`, tbl, running)
	}
	active := fmt.Sprintf("%s IN (%s, %s)", status, ident.Literal(t.Statuses.Queued), ident.Literal(t.Statuses.Processing))
	typ := col(t.TypeColumn)
	return fmt.Sprintf(`WITH RECURSIVE k(type) AS (`+
		`(SELECT %[1]s FROM %[2]s AS t WHERE %[3]s AND %[1]s IS NOT NULL ORDER BY %[1]s LIMIT 1)`+
		` UNION ALL SELECT (SELECT %[1]s FROM %[2]s AS t WHERE %[3]s AND %[1]s > k.type ORDER BY %[1]s LIMIT 1)`+
		` FROM k WHERE k.type IS NOT NULL)`+
		` SELECT k.type::text, c.n FROM k CROSS JOIN LATERAL`+
		` (SELECT count(*)::int8 AS n FROM %[2]s AS t WHERE %[1]s = k.type AND %[4]s) AS c WHERE k.type IS NOT NULL`+
		` UNION ALL SELECT '', count(*)::int8 FROM %[2]s AS t WHERE %[1]s IS NULL AND %[4]s`,
		typ, tbl, active, running)
}
