// Package riversource is a reclaim.Source over a River queue: it reads the
// running jobs of River's river_job table with plain SQL, so that jobguard's
// reclaimer can watch jobs that River workers process.
//
// It does not import River. It needs River's table (created by River's own
// migrations, rivermigrate) and a jobguard.DB that reaches it, usually the
// same pool the River client uses.
//
// # What it guarantees
//
// Every job in state 'running' is listed, in one query, with its kind as
// the job type (or the type Config.Types maps it to) and its attempted_at as
// the start of the current attempt. River sets attempted_at every time it
// fetches the job for an attempt, from the database's clock, so a job that
// River retried, rescued or un-snoozed is measured from its latest attempt,
// not its first. The row of the jobs table that guards the job is named by
// a top-level key of the job's args (Config.RowIDKey, "job_id" by default),
// a JSON string or integer. A job whose args do not name a row is reported
// with ErrNoRowID in its ActiveJob.Err (its River job id as ID): the sweep
// skips it and counts it, never guessing a row. The schema is quoted as an
// identifier and every value is a query parameter.
//
// # What it does not do
//
// It never writes to River's tables: a reclaim fails the jobs-table row (and
// writes the marker the start guard reads), while the River job stays
// 'running' until its worker returns or River's own rescuer re-queues it;
// the start guard then refuses the redelivery. attempted_at is the
// database's clock and the reclaimer measures with its own (reclaim.Config
// Now): skew between them shifts the limit by as much. It reads every
// running job of the selected queues and kinds at once; it does not page.
//
// # Usage
//
//	src, err := riversource.New(riversource.Config{DB: pool, Queues: []string{"chapters"}})
//	if err != nil {
//		return err
//	}
//	r, err := reclaim.New(reclaim.Config{Guard: guard, DB: pool, Redis: rdb, Source: src})
//
// The package is named riversource, not river, so that it can be imported
// beside River itself without a rename.
package riversource
