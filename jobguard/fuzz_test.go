package jobguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// FuzzNew_TableIdentifiers maps a table whose name and status and
// updated-at columns are arbitrary strings. A name PostgreSQL can hold is
// created, quoted, in the test's schema, and the guard must then work on
// exactly that table: a name that reached SQL unquoted would fail to parse
// or hit another table. A name it cannot hold must be refused by New with
// an error naming the field, before any SQL is sent.
func FuzzNew_TableIdentifiers(f *testing.F) {
	for _, s := range [][3]string{
		{"jobs", "status", "updated_at"},
		{`Course"Job`, `st"atus`, `updated"At`},
		{"a.b", "status.x", "t.updated"},
		{"jobs; DROP TABLE jobs; --", "status) OR (1=1", "updated_at = now() --"},
		{"작업", "상태", "갱신"},
		{"\x00", "status", "updated_at"},
		{"jobs", "sta\x00tus", "updated_at"},
		{strings.Repeat("j", 64), "status", "updated_at"},
		{"jobs", "same", "same"},
		{"\xff\xfe", "status", "updated_at"},
		{"pg_class", "relname", "updated_at"},
		{" ", "  ", "\t"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	env := testenv.New(f, testenv.Config{MaxConns: 2})
	f.Fuzz(func(t *testing.T, name, status, updated string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tx, err := env.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		table := jobguard.Table{Schema: env.Schema, Name: name, StatusColumn: status, UpdatedAtColumn: updated,
			GenerationColumn: "generation"}

		var invalid []string // the fields ident.Check refuses
		for _, f := range [][2]string{{"Name", name}, {"StatusColumn", status}, {"UpdatedAtColumn", updated}} {
			if f[1] != "" && ident.Check(f[0], f[1]) != nil { // "" means the default name
				invalid = append(invalid, f[0])
			}
		}
		if len(invalid) > 0 {
			_, err := jobguard.New(ctx, tx, table)
			if err == nil {
				t.Fatalf("New accepted %q", []string{name, status, updated})
			}
			named := false
			for _, f := range invalid {
				named = named || strings.Contains(err.Error(), f)
			}
			if !named || !strings.HasPrefix(err.Error(), "jobguard: new:") {
				t.Fatalf("error %q does not name the bad field (one of %v)", err, invalid)
			}
			return
		}
		g := table
		if g.Name == "" {
			g.Name = jobguard.TableNameDefault
		}
		if g.StatusColumn == "" {
			g.StatusColumn = jobguard.StatusColumnDefault
		}
		if g.UpdatedAtColumn == "" {
			g.UpdatedAtColumn = jobguard.UpdatedAtColumnDefault
		}
		created := create(ctx, tx, g)
		guard, err := jobguard.New(ctx, tx, table)
		if !created {
			if err == nil {
				t.Fatalf("New accepted %q, which could not be created", []string{name, status, updated})
			}
			return
		}
		if err != nil {
			t.Fatalf("New refused a table that exists as mapped: %v", err)
		}

		// The guard's statements reach exactly this table.
		id, other := uuid.NewString(), uuid.NewString()
		if _, err := tx.Exec(ctx, "INSERT INTO "+ident.Quote(env.Schema, g.Name)+" (id, "+ident.Quote(g.StatusColumn)+
			") VALUES ($1, 'PROCESSING'), ($2, 'PROCESSING')", id, other); err != nil {
			t.Fatal(err)
		}
		exec := jobguard.Execution{JobID: id}
		if err := guard.CompleteIfActive(ctx, tx, exec); err != nil {
			t.Fatalf("complete: %v", err)
		}
		if err := guard.CompleteIfActive(ctx, tx, exec); !errors.Is(err, jobguard.ErrJobTerminal) {
			t.Fatalf("second complete: %v, want ErrJobTerminal", err)
		}
		var completed int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+ident.Quote(env.Schema, g.Name)+" WHERE "+
			ident.Quote(g.StatusColumn)+" = 'COMPLETED'").Scan(&completed); err != nil {
			t.Fatal(err)
		}
		if completed != 1 {
			t.Fatalf("%d rows completed, want 1", completed)
		}
	})
}

// create makes the mapped table in a savepoint and reports whether
// PostgreSQL accepted it.
func create(ctx context.Context, tx pgx.Tx, t jobguard.Table) bool {
	if !utf8.ValidString(t.Name + t.StatusColumn + t.UpdatedAtColumn) {
		return false
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false
	}
	_, err = sp.Exec(ctx, "CREATE TABLE "+ident.Quote(t.Schema, t.Name)+" (id uuid PRIMARY KEY, "+
		ident.Quote(t.StatusColumn)+" text NOT NULL, "+ident.Quote(t.UpdatedAtColumn)+" timestamptz NOT NULL DEFAULT now(), "+
		"failure_reason text, generation bigint NOT NULL DEFAULT 0)")
	if err != nil {
		_ = sp.Rollback(ctx)
		return false
	}
	return sp.Commit(ctx) == nil
}
