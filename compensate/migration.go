package compensate

import (
	"embed"
	"io/fs"
	"strings"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations holds the SQL files that create the default artifacts table
// (job_artifacts), named in the order they apply. Each file is plain SQL
// that can be run more than once, so any migration tool can take them as
// they are. A table under another name needs the same columns and unique
// key.
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
	var all strings.Builder
	for _, n := range names {
		b, err := fs.ReadFile(f, n)
		if err != nil {
			panic(err)
		}
		all.Write(b)
		all.WriteString("\n")
	}
	return all.String()
}
