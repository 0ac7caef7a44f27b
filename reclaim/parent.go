package reclaim

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// ParentRule follows a reclaim into the jobs' parents (the course, the
// video, the export's source). Sweep calls it once per job type, inside the
// reclaim's transaction (a savepoint of it), with only the jobs whose row
// really changed; a job that lost the race never reaches it. When it
// returns an error, the reclaim of its jobs is rolled back with it, the
// other jobs are reclaimed, and each of its jobs is then tried again alone,
// in a transaction of its own, so that one parent that refuses a write
// holds back only its own job: the refused one is counted in
// Report.RuleErrors and tried again at the next sweep. Each rule runs in a
// savepoint of its own, with lock_timeout and statement_timeout set to
// what is left of the sweep's budget for waits (see
// Config.LivenessTimeout; once it is spent, a held row fails at once and a
// statement has 100ms): a statement that waits or runs past it, or one
// the rule let fail and went on (its savepoint no longer releases), fails
// the rule, never the page. So does a rule that returns or panics with a
// query's rows still open on tx, which leaves the transaction where no
// statement runs: the sweep gives that transaction up and reclaims the
// rest of the page in a new one. A rule
// must therefore be safe to run again for a job it saw before.
// A rule that panics fails as one that returns an error does (the error
// wraps a *jobguard.PanicError; the sweep's summary logs its stack). A rule
// must return when ctx ends: it holds the reclaim's transaction, so it
// cannot be abandoned, and the sweep's deadline (SweepTimeout) reaches it
// only through ctx.
type ParentRule func(ctx context.Context, tx pgx.Tx, jobs []jobset.Job) error

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
	// From are the values Column may hold for the write to change it: a
	// reclaim moves a parent only from the state it expects, so a parent
	// that another job moved on meanwhile (a course its last chapter made
	// READY) is left as it is. Required.
	From []string
}

// SetParent returns a rule that, in one statement, sets p.Column to p.Value
// on the parents of the reclaimed jobs whose Column is one of p.From. It
// writes nothing else: an export job's rule names the export status column,
// so the source row keeps its own status (READY) and only its export is
// marked failed.
func SetParent(p ParentUpdate) (ParentRule, error) {
	if p.IDColumn == "" {
		p.IDColumn = "id"
	}
	table, err := ident.QuoteTable(p.Schema, p.Table)
	if err != nil {
		return nil, fmt.Errorf("reclaim: parent rule: %w", err)
	}
	for _, f := range []struct{ field, name string }{
		{"IDColumn", p.IDColumn}, {"Column", p.Column},
	} {
		if err := ident.Check(f.field, f.name); err != nil {
			return nil, fmt.Errorf("reclaim: parent rule: %w", err)
		}
	}
	if p.Value == "" {
		return nil, fmt.Errorf("reclaim: parent rule: Value is empty")
	}
	if len(p.From) == 0 {
		return nil, fmt.Errorf("reclaim: parent rule: From is empty; name the values of %s a reclaim may move from, "+
			"so that a parent another job moved on is left alone", p.Column)
	}
	from := slices.Clone(p.From)
	col := ident.Quote(p.Column)
	sql := fmt.Sprintf(`UPDATE %s SET %s = $1 WHERE %s = ANY($2) AND %s::text = ANY($3::text[])`,
		table, col, ident.Quote(p.IDColumn), col)
	return func(ctx context.Context, tx pgx.Tx, jobs []jobset.Job) error {
		var parents []string
		for _, j := range jobs {
			if j.ParentID != "" {
				parents = append(parents, j.ParentID)
			}
		}
		if len(parents) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, sql, p.Value, pgarray.Of(parents), from); err != nil {
			return fmt.Errorf("set %s.%s: %w", p.Table, p.Column, err)
		}
		return nil
	}, nil
}
