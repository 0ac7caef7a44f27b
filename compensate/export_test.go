package compensate

// KeepSQL is the statement that keeps an execution's pending artifacts,
// for a test that pins its plan.
func KeepSQL(a *Artifacts) string { return a.sql.keep }

// OwedOfSQL is the statement that takes one execution's next owed
// artifact, for a test that pins its plan.
func OwedOfSQL(a *Artifacts) string { return a.sql.owedOf }
