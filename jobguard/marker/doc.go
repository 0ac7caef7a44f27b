// Package marker keeps the reclaim markers: the record, per job, that the
// reclaimer failed an execution of a given generation, which the start
// guard reads so that a late worker's redelivery is refused even after
// the job's failure reason was overwritten.
//
// Two stores hold them, one per jobguard.MarkerBackend: PostgresStore, a
// table in the jobs' database (Migration creates it; the default, and
// what Start reads inside its conditional statement), and RedisStore,
// keys under the guard's Shared.Prefix. Build either from the guard; the
// reclaimer and the start guard do, and an operator's tool deleting a
// marker should too.
//
// # What it guarantees
//
//   - One job, one marker: every key or row is the job's canonical id
//     (the store canonicalizes every id it is given, whatever its
//     spelling) and its jobs table's key, so several jobs tables share a
//     prefix or a marker table without confusing their jobs. An id the
//     id column cannot hold is refused with jobguard.ErrInvalidJobID
//     before anything is sent.
//   - A marker never moves backwards: a write of a lower generation
//     leaves a live marker of a higher one as it is, so two reclaimers
//     writing out of order cannot let a reclaimed execution through.
//   - The Postgres store's times are the database's: a marker is stamped
//     and expires on its clock. Given the reclaim's transaction, a marker
//     commits with the reclaim or not at all.
//
// # What it does not guarantee
//
//   - Markers expire (TTLDefault, 7 days). Expired rows stay in the table
//     until the retention sweep deletes them (PostgresStore.Retention,
//     run by package retain); expired keys leave Redis on their own.
//   - Redis markers are written after the reclaim commits: a failed write
//     is counted by the reclaimer, and the job's failure reason is then
//     the start guard's only evidence.
//
// # Why it does not import jobguard
//
// The start guard, in package jobguard, reads markers, so jobguard
// imports this package. The stores take the narrow Jobs interface
// instead of a *jobguard.Guard, which satisfies it: the table's key, the
// ids' canonical spelling, and where the guard's Shared settings put the
// markers (MarkerPlace), so that a store cannot be configured to look
// anywhere the reclaimer does not write.
//
//	markers, err := marker.NewPostgresStore(guard, marker.Config{})
//	m, found, err := markers.Read(ctx, pool, jobID)
//	err = markers.Delete(ctx, pool, jobID) // an operator's retry on a status-only table
package marker
