// Package retain keeps jobguard's side tables bounded: it removes, in small
// batches, the rows that nothing will act on again once they are older than
// an age of the operator's choosing.
//
// Three tables grow by a row (or a few) per job, forever, unless something
// deletes them: settle's finalize records, compensate's artifacts and the
// reclaim markers of marker.PostgresStore. Each package owns its table's
// rule, which says which rows are finished and which column dates them on
// the database's clock (settle.Settler.Retention, compensate.Artifacts.Retention,
// marker.PostgresStore.Retention); this package runs the rules.
//
// What it guarantees:
//
//   - A row is removed only when its owner's rule says it is finished: a
//     settled record (confirmed or given up), an artifact compensated for
//     good or kept with no open record of the same thing, a marker past its
//     expiry. A pending record, an owed artifact and a live marker are never
//     removed, whatever the age.
//   - Age is judged on the database's clock (statement_timestamp()), never
//     the process's: a sweeper whose clock runs ahead removes nothing young.
//   - A sweep never waits on a worker: each batch locks the rows it removes
//     with FOR UPDATE SKIP LOCKED, so a row another transaction holds is
//     skipped and left for the next sweep, and each batch runs under a short
//     lock_timeout (Config.LockTimeout), so a table lock (a migration) stops
//     that table's pass with an error instead of queueing the workers behind
//     it.
//   - Each batch is a transaction of its own, of at most Config.Batch rows,
//     reading only the rows it removes through the owner's partial index.
//   - Every sweep reports what it removed, per table (Report), counts it in
//     jobguard.retain.rows and logs one summary line.
//
// What it does not do:
//
//   - It never touches usage's ledger: the ledger is the bill. Archive or
//     partition it as the operator's guide says.
//   - Keeping a table forever is a choice made by name (Table.Keep); an age
//     of zero is the rule's default, and a negative one is refused, so that
//     neither keeps everything by accident.
//   - A row held by another transaction for the whole sweep stays until a
//     later sweep finds it free.
//
// A sweeper over the three tables:
//
//	sw, err := retain.New(retain.Config{DB: pool, Tables: []retain.Table{
//		{Rule: settler.Retention()},
//		{Rule: artifacts.Retention(), Age: 14 * 24 * time.Hour},
//		{Rule: markers.Retention()},
//	}})
//	preview, err := sw.Preview(ctx) // what a sweep would remove; changes nothing
//	rep, err := sw.Sweep(ctx)
//	go sw.Run(ctx)
package retain
