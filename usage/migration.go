package usage

import (
	"embed"

	"github.com/jobguard/jobguard/internal/sqlfile"
)

//go:embed migrations/*.sql
var embedded embed.FS

// MigrationFiles holds the SQL files that create the default ledger table
// (usage_ledger), named in the order they apply. Each file is plain SQL that
// can be run more than once, so any migration tool can take them as they
// are. A ledger under another name needs the same columns and primary key:
// apply every file, replacing the table's name. The second file keys the
// ledger by the jobs table as well as the job; on a ledger with rows, see
// its comments for which jobs table they are given.
//
// Migration is the SQL of every file in MigrationFiles, in order, as one string
// for callers that just want to Exec it.
var MigrationFiles, Migration = sqlfile.Load(embedded, "migrations")
