package settle

import (
	"embed"

	"github.com/jobguard/jobguard/internal/sqlfile"
)

//go:embed migrations/*.sql
var embedded embed.FS

// MigrationFiles holds the SQL files that create the default table of finalize
// records (job_settlements), named in the order they apply. Each file is
// plain SQL that can be run more than once, so any migration tool can take
// them as they are. A table under another name needs the same columns,
// primary key, check and trigger: apply every file, replacing the table's
// name.
//
// Migration is the SQL of every file in MigrationFiles, in order, as one string
// for callers that just want to Exec it. The ledger that records are billed
// into comes from usage.Migration.
var MigrationFiles, Migration = sqlfile.Load(embedded, "migrations")
