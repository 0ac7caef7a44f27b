// Command jobguard is the operator's tool for the guards on a jobs table:
// it says what the reclaimer would do with a job and why, runs a sweep or
// its dry run, keeps the runtime limit of each job type (and suggests them
// from the runtimes of finished jobs), retries a failed job, and runs the
// reclaimer as a service with a Prometheus endpoint.
//
// From a checkout of the repository:
//
//	go install -buildvcs=true ./cmd/jobguard
//
// (-buildvcs=true: a workspace build records the VCS revision, which
// 'jobguard version' prints for a bug report, only when asked to.)
//
// It is a module of its own, so that its Prometheus exporter and its flag
// handling never reach the library's users. Until the modules are tagged,
// its go.mod points at the library in the same checkout (a replace
// directive), which go install with a version (@latest) refuses; the
// checkout's go.work joins the two.
//
// # Commands
//
//	jobguard explain <job-id>          what a sweep would decide for the job now, and why
//	jobguard sweep [--dry-run]         one sweep; --dry-run prints its plan and writes nothing
//	jobguard limits list               the runtime limit of each job type
//	jobguard limits set <type> <dur>   set one
//	jobguard limits pause <type>       stop reclaiming a type (--shadow: count, write nothing)
//	jobguard limits resume <type>      reclaim it again
//	jobguard limits suggest [--apply]  suggest limits from the finished jobs' runtimes
//	jobguard retry <job-id>            an operator's retry of a FAILED job
//	jobguard run [--shadow]            the reclaimer service, until SIGTERM
//	jobguard version                   the build: versions, VCS revision, Go, platform
//	jobguard help [command | config]
//
// Every command takes --help, and --json prints its result as JSON for
// scripts, and any error as one JSON object on one line of stderr
// ({"command", "error", "hint", "code"}, the code being the exit code),
// a mistyped flag or a bad config file included. A long scan draws a progress line on stderr when stdout and
// stderr are terminals, and nothing when they are piped.
//
// # Settings
//
// The servers come from --database-url and --redis-url, else
// JOBGUARD_DATABASE_URL and JOBGUARD_REDIS_URL. Redis is contacted only
// when something lives there: the reclaim markers with --markers redis
// (JOBGUARD_MARKERS, or the config file's "shared": {"markers": ...}; the
// default, postgres, keeps them in the job_reclaim_markers table), notices
// with --notices redis, or a BullMQ queue. The jobs table's mapping
// (jobguard.Table), the settings shared with the workers (jobguard.Shared:
// where the markers live, their Redis prefix, the reclaimed failure reason, the notice
// channel, the leader key), the limits table, the reclaimer's settings, its
// source and its parent rules come from flags, or from a JSON config file
// (--config, or JOBGUARD_CONFIG; 'jobguard help config' shows it), which the
// flags override. Without either, they are the bundled migrations' table
// and the library's defaults. A Prisma-style table is mapped by its names
// alone:
//
//	jobguard explain --schema public --table CourseJob --updated-at-column updatedAt \
//		--failure-reason-column failureReason --type-column kind \
//		--parent-id-column courseId --started-at-column startedAt c1
//
// The passwords of the servers' URLs are masked (xxxxx) in everything the
// command prints: its errors, logs (text and JSON, go-redis's own lines
// included), help and results, for URLs that parse and those that do not.
// So is any password it can tell (a URL's userinfo, a password= value) in
// what it reads from the servers: a worker's failure reason that quotes its
// URL, a marker's reason, a job's type. All its output, text and JSON,
// passes through one redacting writer.
// A message about a URL names where it came from: the flag, the
// environment variable, or the default; one about the config file names
// the file and whether --config or JOBGUARD_CONFIG gave it.
//
// # Exit codes
//
//	0  done
//	1  error: a server, the table mapping, a write (the message says what to do);
//	   or a bug: a panic, printed with its stack
//	2  usage: an unknown command or flag, a missing or malformed argument,
//	   a job id the id column cannot hold
//	3  the job does not exist in the mapped table
//	4  refused: the job's status does not allow it (retry of a job that is
//	   not FAILED)
//
// # What it does not run
//
// The settle sweep and the compensators of artifacts other than files need
// the application's own code (settle's handlers and increments,
// compensate's compensators): run them in a process of the application's.
// docs/operator.md says how to turn the reclaimer on safely (shadow mode,
// then suggested limits, then the live service) and what to watch.
package main
