// Package flow holds what the examples and the demo share, and nothing
// of the library's wiring: each command builds the guard, the start
// guard, the heartbeat, the watcher, the reclaimer and the rest itself, in
// its own main, and hands them to the processors here.
//
// The processors are the chapter ("add weeks to a course"), video and
// export flows over the examples' own product tables: chapter.go,
// video.go and export.go are the three shapes of a guarded job, each meant
// to be read top to bottom. Each takes its dependencies as struct fields
// and uses only the public API of jobguard, heartbeat, compensate, settle,
// usage and watch. With a watch.Watcher, the chapter and video processors
// run each execution's external call under the context it gives them: a
// reclaim's notice cancels the call at once, instead of letting it run to
// a refused completion.
//
// Beside them: the enqueue helpers; the values a command passes into the
// library's constructors (ParentRules for reclaim, Compensators for
// compensate, VideoHandlers and VideoIncrements for settle, and
// Config.Shared for the guard, so that every process agrees on the Redis
// prefix and the reclaimers' leader key); and the examples' plumbing:
// Connect (the pool with the schema as its search_path, Redis, the
// library's migrations and the product tables), the transport that
// -notices chooses, and the background loops a command runs until it
// closes its connections.
package flow
