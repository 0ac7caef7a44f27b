package jobguard

import (
	"embed"
	"io/fs"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations holds the SQL files that create the default jobs table, named in
// the order they apply (0001_jobs.sql, ...). Each file is plain SQL that can
// be run more than once, so any migration tool can take them as they are.
var Migrations fs.FS = mustSub(migrationFiles, "migrations")

// Migration is the SQL of every file in Migrations, in order, as one string
// for callers that just want to Exec it.
var Migration = mustConcat(Migrations)

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	return sub
}

func mustConcat(f fs.FS) string {
	names, err := fs.Glob(f, "*.sql")
	if err != nil {
		panic(err)
	}
	var all string
	for _, n := range names {
		b, err := fs.ReadFile(f, n)
		if err != nil {
			panic(err)
		}
		all += string(b) + "\n"
	}
	return all
}
