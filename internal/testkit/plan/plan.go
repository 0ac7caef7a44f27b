// Package plan reads the plan PostgreSQL runs a statement with, for the
// tests that pin a plan.
package plan

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Generic returns the plan of sql run once with args under a generic plan,
// the one a prepared statement settles on, as EXPLAIN ANALYZE prints it
// without costs or timings: it shows the index used and the rows each node
// read. args is the EXECUTE's argument list as SQL ("1000000, 500"). The
// statement runs in a transaction that is rolled back, so it changes
// nothing.
func Generic(t testing.TB, pool *pgxpool.Pool, sql, args string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("plan: begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, stmt := range []string{`SET LOCAL plan_cache_mode = force_generic_plan`, `PREPARE planned AS ` + sql} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			t.Fatalf("plan: %s: %v", stmt, err)
		}
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE planned(`+args+`)`)
	if err != nil {
		t.Fatalf("plan: explain: %v", err)
	}
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatalf("plan: %v", err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("plan: %v", err)
	}
	return strings.Join(lines, "\n")
}
