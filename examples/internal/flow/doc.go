// Package flow holds the processors that the examples and the demo share:
// the chapter ("add weeks to a course"), video and export flows over the
// examples' own product tables, their parent rules for the reclaimer, and
// the connection plumbing.
//
// Each processor uses only the public API of jobguard, heartbeat, reclaim,
// usage, compensate and watch, and is meant to be read top to bottom:
// chapter.go, video.go and export.go are the three shapes of a guarded job.
//
// Open starts one watch.Watcher per process (Config.Notices chooses Redis
// pub/sub, Postgres LISTEN/NOTIFY, or none), and the chapter and video
// processors run each execution's external call under the context it
// gives them (Env.Watch): a reclaim's notice cancels the call at once,
// instead of letting it run to a refused completion. The reclaimers that
// NewReclaimer builds publish those notices.
package flow
