// Package bullmq is a reclaim.Source over a BullMQ queue in Redis.
//
// It reads the queue's active list, "<prefix>:<queue>:active", and for each
// listed job its hash "<prefix>:<queue>:<job id>": processedOn as the start
// of the current attempt and name as the job type. The list and the hashes
// are read by one Lua script, so they are one consistent state: a job that
// finishes (and whose hash is removed) between two separate reads can not be
// mistaken for an active job without a start time.
//
// # What it guarantees
//
// processedOn is set by BullMQ every time a job moves to active, so it
// measures the current attempt, not the job's first one. A listed id with no
// hash is reported with ErrNoJobHash and one with no processedOn with a zero
// start time; the sweep skips and counts both, never guessing. A job maps to
// its row in the jobs table by its BullMQ job id, or by a field of its data
// (Config.RowIDField).
//
// # What it does not do
//
// processedOn is the worker's clock; skew between the worker and the
// reclaimer shifts the limit by as much. A sweep reads the whole active
// list, a page (Query.PageSize jobs) per script call, oldest first, so its
// cost grows with the active jobs, not only the stuck ones (a few
// milliseconds for thousands); a job that moves while the list is paged may
// be listed twice or missed until the next sweep. On Redis Cluster the
// prefix must carry a hash tag ("{bull}"), as BullMQ itself requires, so
// that the list and the hashes share a slot.
//
// # BullMQ versions
//
// The source reads only what BullMQ 5 and BullMQ 6 write alike, and its
// tests run a real worker of each against it: the active list, at whose head
// a worker pushes a job's id when it takes the job, and in the job's hash
// processedOn (whole milliseconds, set on every move to active), name, and
// data (the job's data as JSON). BullMQ 6 moved its Redis code behind a
// pluggable backend, dropped the paused list (a paused queue's jobs stay in
// wait), removed legacy repeatable jobs and made ioredis a peer dependency a
// Redis user installs; none of it changes those keys or fields, so the
// source needs no setting per version. BullMQ 6's PostgreSQL backend keeps a
// queue in PostgreSQL instead of Redis: this source can not read such a queue.
//
// # Usage
//
//	src, err := bullmq.New(bullmq.Config{Redis: rdb, Prefix: "{bull}", Queue: "chapters", RowIDField: "jobId"})
//	if err != nil {
//		return err
//	}
//	r, err := reclaim.New(reclaim.Config{Guard: guard, DB: pool, Redis: rdb, Source: src})
package bullmq
