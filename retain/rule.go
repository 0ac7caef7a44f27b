package retain

import (
	"fmt"
	"time"

	"github.com/jobguard/jobguard/internal/interval"
)

// Rule is one table's retention rule: which rows are finished, and which
// column dates them on the database's clock. The package that owns the
// table builds it (settle.Settler.Retention, compensate.Artifacts.Retention,
// marker.PostgresStore.Retention); a Sweeper runs it.
type Rule struct {
	name   string
	defAge time.Duration
	// remove deletes one batch: $1 the age in µs, $2 the batch size →
	// count, oldest, newest of the rows it removed.
	remove string
	// preview counts what remove would remove, with no limit: $1 the age in
	// µs → count, oldest, newest.
	preview string
}

// NewRule returns the rule that removes the rows of table (quoted, as SQL
// names it) for which finished holds, once column is older than the age:
// column < statement_timestamp() - age. finished is SQL over the table
// under the alias r; write a partial index's predicate in it as the index
// does, and lead the index with column (after any column finished fixes by
// equality), so that a batch reads only the rows it removes. name is how
// reports, the metric and the log name the table; defaultAge is the age
// of a Table that sets none.
//
// It is for the packages that own a table; a table of your own can have
// one too.
func NewRule(name, table, column, finished string, defaultAge time.Duration) Rule {
	old := fmt.Sprintf(`(%s) AND r.%s < statement_timestamp() - %s`, finished, column, interval.Param("$1"))
	// Each batch locks the rows it removes, skipping those another
	// transaction holds: a worker's row is left for the next sweep, never
	// waited on. The rows are found by the index, then removed by their
	// ctid, which the locking subquery read, so the DELETE reads nothing
	// else; a ctid names a row only within its own partition (or
	// inheritance child), so the partition, tableoid, is matched too.
	remove := fmt.Sprintf(`WITH d AS (DELETE FROM %s AS x USING (`+
		`SELECT r.tableoid AS o, r.ctid AS c FROM %s AS r WHERE %s LIMIT $2 FOR UPDATE OF r SKIP LOCKED) AS s`+
		` WHERE x.tableoid = s.o AND x.ctid = s.c RETURNING x.%s AS at)`+
		` SELECT count(*), min(at), max(at) FROM d`, table, table, old, column)
	preview := fmt.Sprintf(`SELECT count(*), min(r.%s), max(r.%s) FROM %s AS r WHERE %s`, column, column, table, old)
	return Rule{name: name, defAge: defaultAge, remove: remove, preview: preview}
}

// Name is how reports, the metric and the log name the rule's table.
func (r Rule) Name() string { return r.name }

// DefaultAge is the age of a Table that sets none.
func (r Rule) DefaultAge() time.Duration { return r.defAge }

// RemoveSQL is the statement of one batch: $1 the age in microseconds, $2
// the batch size; it returns the count, the oldest and the newest age
// column of the rows it removed. For plans and tests.
func (r Rule) RemoveSQL() string { return r.remove }
