package reclaim

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/jobguard"
)

// ParentRule follows a reclaim into the jobs' parents (the course, the
// video, the export's source). Sweep calls it once per job type, inside the
// reclaim's transaction, with only the jobs whose row really changed; a job
// that lost the race never reaches it. An error rolls the whole reclaim
// back, and the sweep returns it.
type ParentRule func(ctx context.Context, tx pgx.Tx, jobs []jobguard.JobState) error

// ParentUpdate is the write of SetParent: set Column to Value on the rows of
// Table whose IDColumn is a reclaimed job's ParentID.
type ParentUpdate struct {
	// Schema holds the table. Defaults to "" (search_path).
	Schema string
	// Table is the parent table. Required.
	Table string
	// IDColumn is the column jobs' parent ids refer to. Defaults to "id".
	IDColumn string
	// Column is the column to set: "status" for a course or video, the export
	// status for an export job whose source must stay READY. Required.
	Column string
	// Value is written to Column. Required.
	Value string
}

// SetParent returns a rule that, in one statement, sets p.Column to p.Value
// on the parents of the reclaimed jobs. It writes nothing else: an export
// job's rule names the export status column, so the source row keeps its
// own status (READY) and only its export is marked failed.
func SetParent(p ParentUpdate) (ParentRule, error) {
	if p.IDColumn == "" {
		p.IDColumn = "id"
	}
	for _, f := range []struct{ field, name string }{
		{"Table", p.Table}, {"IDColumn", p.IDColumn}, {"Column", p.Column},
	} {
		if err := ident.Check(f.field, f.name); err != nil {
			return nil, fmt.Errorf("reclaim: parent rule: %w", err)
		}
	}
	if p.Value == "" {
		return nil, fmt.Errorf("reclaim: parent rule: Value is empty")
	}
	sql := fmt.Sprintf(`UPDATE %s SET %s = $1 WHERE %s = ANY($2)`,
		ident.Quote(p.Schema, p.Table), ident.Quote(p.Column), ident.Quote(p.IDColumn))
	return func(ctx context.Context, tx pgx.Tx, jobs []jobguard.JobState) error {
		var parents []string
		for _, j := range jobs {
			if j.ParentID != "" {
				parents = append(parents, j.ParentID)
			}
		}
		if len(parents) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, sql, p.Value, parents); err != nil {
			return fmt.Errorf("set %s.%s: %w", p.Table, p.Column, err)
		}
		return nil
	}, nil
}
