// Package perf measures a job's whole life through the public API beside
// its hand-written floor, in the same run: round trips per job, counted
// by a pgx tracer and a go-redis hook, and throughput with K workers on a
// pool of K connections, the guarded and the plain lifecycle in
// interleaved rounds so that a loaded machine slows both alike.
//
// It lives apart from the packages it measures because a job's life
// crosses them: jobguard's start guard and Finalize, heartbeat's Beat,
// usage's Accrue. Its test pins the round trips a guarded life may take,
// so that a statement added to the path fails a test, not a benchmark
// nobody reads.
//
//	go test -run '^$' -bench 'Lifecycle$' -benchtime 2000x ./internal/testkit/perf/
//	go test -run '^$' -bench LifecycleThroughput -benchtime 7x ./internal/testkit/perf/
package perf
