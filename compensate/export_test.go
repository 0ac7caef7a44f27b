package compensate

// KeepSQL is the statement that keeps an execution's pending artifacts,
// for a test that pins its plan.
func KeepSQL(a *Artifacts) string { return a.sql.keep }
