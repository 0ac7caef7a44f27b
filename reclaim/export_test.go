package reclaim

// RunningSQL is the statement of s.CountRunning, for a test that pins its
// plan.
func RunningSQL(s *TableSource) string { return s.running }
