package flow

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

//go:embed schema.sql
var productSchema string

// The job types of the examples.
const (
	TypeChapter = "chapter"
	TypeVideo   = "video"
	TypeExport  = "export"
)

// migrate creates the schema and applies every migration in one
// transaction, serialized by an advisory lock so that processes starting
// together do not trip over each other's CREATE TABLE IF NOT EXISTS.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "jobguard-examples:"+schema); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("migrate: create schema %s: %w", schema, err)
		}
		for _, m := range []struct{ name, sql string }{
			{"jobguard", jobguard.Migration},
			{"reclaim", reclaim.Migration},
			{"usage", usage.Migration},
			{"compensate", compensate.Migration},
			{"settle", settle.Migration},
			{"examples", productSchema},
		} {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migrate: %s: %w", m.name, err)
			}
		}
		return nil
	})
}
