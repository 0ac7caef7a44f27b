package compensate

import (
	"embed"

	"github.com/jobguard/jobguard/internal/sqlfile"
)

//go:embed migrations/*.sql
var embedded embed.FS

// MigrationFiles holds the SQL files that create the default artifacts table
// (job_artifacts), named in the order they apply. Each file is plain SQL
// that can be run more than once, so any migration tool can take them as
// they are. A table under another name needs the same columns and unique
// key: apply every file, replacing the table's name. The third file keys
// the artifacts by the jobs table as well as the execution; on a table
// with rows, see its comments for which jobs table they are given.
//
// Migration is the SQL of every file in MigrationFiles, in order, as one string
// for callers that just want to Exec it.
var MigrationFiles, Migration = sqlfile.Load(embedded, "migrations")
