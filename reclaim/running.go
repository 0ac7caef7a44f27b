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

// CountRunning counts the running attempts of each type: the active
// (QUEUED or PROCESSING) rows with a start, as Start stamps it and Retry
// clears it (the rows of a NULL type count as the type ""). It is one
// statement over the bundled migration's partial index on the active
// jobs, (type, started_at): the statuses are literals as the index names
// them and the columns are compared bare, so it reads that index (and the
// active rows' pages), never the finished rows; it costs what the running
// jobs cost.
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

// buildRunning is CountRunning's statement over t, which has a
// started-at column (a TableSource's table).
func buildRunning(t jobguard.Table) string {
	col := func(name string) string { return "t." + ident.Quote(name) }
	typ := "''::text"
	if t.TypeColumn != "" {
		typ = "coalesce(" + col(t.TypeColumn) + "::text, '')"
	}
	return fmt.Sprintf(`SELECT %s, count(*)::int8 FROM %s AS t WHERE %s IN (%s, %s) AND %s IS NOT NULL GROUP BY 1`,
		typ, t.QualifiedName(), col(t.StatusColumn), ident.Literal(t.Statuses.Queued), ident.Literal(t.Statuses.Processing),
		col(t.StartedAtColumn))
}
