package marker

import (
	"time"

	"github.com/jobguard/jobguard/retain"
)

// RetainAfterExpiryDefault is how long past its expiry a marker is kept,
// by the retention rule (PostgresStore.Retention).
const RetainAfterExpiryDefault = 24 * time.Hour

// Retention is the retention rule of the marker table: a marker whose
// expires_at, on the database's clock, is further in the past than the age
// is removed. Nothing reads an expired marker (Read and the start guard
// ignore it; a write replaces it), so the age is only a margin for an
// operator looking into a recent reclaim. A live marker is never removed:
// the age cannot be negative, so its expiry is always before the
// database's now.
//
// The rule covers every jobs table's markers: an expired marker is dead for
// all of them, and the expiry index (MigrationFiles) serves the sweep
// without reading a live one. Run it with package retain.
func (s *PostgresStore) Retention() retain.Rule {
	return retain.NewRule(TableName, s.table, "expires_at", `true`, RetainAfterExpiryDefault)
}
