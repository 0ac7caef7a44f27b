package watch

// Checks returns how many checks w's Run has finished, so that tests can
// wait for the check that follows a subscription.
func Checks(w *Watcher) int64 { return w.checks.Load() }
