package jobguard

import (
	"embed"

	"github.com/jobguard/jobguard/internal/sqlfile"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations holds the SQL files that create the default jobs table, named in
// the order they apply (0001_jobs.sql, ...). Each file is plain SQL that can
// be run more than once, so any migration tool can take them as they are.
//
// Migration is the SQL of every file in Migrations, in order, as one string
// for callers that just want to Exec it.
var Migrations, Migration = sqlfile.Load(migrationFiles, "migrations")
