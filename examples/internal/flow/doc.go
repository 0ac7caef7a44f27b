// Package flow holds the processors that the examples and the demo share:
// the chapter ("add weeks to a course"), video and export flows over the
// examples' own product tables, their parent rules for the reclaimer, and
// the connection plumbing.
//
// Each processor uses only the public API of jobguard, heartbeat, reclaim,
// usage and compensate, and is meant to be read top to bottom: chapter.go,
// video.go and export.go are the three shapes of a guarded job.
package flow
