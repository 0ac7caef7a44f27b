package chaos

import (
	"math/rand/v2"
	"strconv"
	"time"
)

// Timing holds the run's short limits. Workers and the driver share it, so
// the faults a plan asks for are measured against the limits in force.
type Timing struct {
	// Limit is every job type's maximum runtime.
	Limit time.Duration
	// NoProgress is the reclaimer's no-progress threshold.
	NoProgress time.Duration
	// Heartbeat is the heartbeat interval.
	Heartbeat time.Duration
	// Lease is how long a claimed queue row stays invisible.
	Lease time.Duration
	// WorkerTTL is the TTL of a worker process's lease (package lease):
	// a killed or stopped worker's jobs are rescued this long after its
	// last renewal, mostly before Limit and NoProgress would reclaim
	// them. Each renewal's statement may take half of it.
	WorkerTTL time.Duration
	// WorkerRenew is how often a worker renews its lease.
	WorkerRenew time.Duration
	// SettleGrace is how long a finalize record is left to its worker
	// before a settle sweep may take it.
	SettleGrace time.Duration
	// SettleBackoff is the settle sweep's first pause after a failed
	// attempt; it doubles up to eight times as much.
	SettleBackoff time.Duration
	// SettleAttempts is how many attempts a record gets before it is given
	// up.
	SettleAttempts int
}

// TimingDefault is the timing of the run: a hung call outlives Limit and
// NoProgress, a slow call that beats does not look stalled, and a very slow
// one outlives its Lease and is delivered a second time while it still
// runs.
var TimingDefault = Timing{
	Limit:      400 * time.Millisecond,
	NoProgress: 250 * time.Millisecond,
	Heartbeat:  40 * time.Millisecond,
	Lease:      2 * time.Second,

	WorkerTTL:   300 * time.Millisecond,
	WorkerRenew: 100 * time.Millisecond,

	SettleGrace:    300 * time.Millisecond,
	SettleBackoff:  20 * time.Millisecond,
	SettleAttempts: 4,
}

// Plan is the fate of one job's first delivery, drawn from the run's seed
// when the job is created and stored in its payload, so a replay with the
// same seed asks for the same faults. Later deliveries run plainly.
type Plan struct {
	// Work is how long the call takes, beating progress as it goes.
	Work time.Duration `json:"work"`
	// Hang makes the call hang silently (no heartbeat) for Work, which is
	// then longer than Limit: the job is reclaimed and the result is late.
	Hang bool `json:"hang,omitempty"`
	// Pause holds the save transaction open this long after its first
	// product rows, so kills and terminated connections land mid-save.
	Pause time.Duration `json:"pause,omitempty"`
	// Deleted makes a video's re-check say the video was deleted.
	Deleted bool `json:"deleted,omitempty"`
	// FailUpdate names a finalize update ("asset", "content") whose store
	// refuses the worker's write and takes the settle sweep's.
	FailUpdate string `json:"fail_update,omitempty"`
	// FailForGood makes FailUpdate's store refuse every write: the record
	// is given up, and the video never billed.
	FailForGood bool `json:"fail_for_good,omitempty"`
	// SlowUpdate holds the worker's asset update this long after the
	// completion committed, so that kills land between the completion and
	// the billing.
	SlowUpdate time.Duration `json:"slow_update,omitempty"`
	// Quantity is the video's billed milliseconds.
	Quantity int64 `json:"quantity,omitempty"`
	// Account is billed for a video.
	Account string `json:"account,omitempty"`
	// NoUpdates finalizes a video with no metadata update: it only bills.
	NoUpdates bool `json:"no_updates,omitempty"`
	// Upper hands the job's id to the library in upper case, at every
	// delivery, as a caller that keeps its uuids so would.
	Upper bool `json:"upper,omitempty"`
}

// NewPlan draws a job's plan.
func NewPlan(r *rand.Rand, kind string, t Timing) Plan {
	p := Plan{Work: time.Duration(10+r.IntN(40)) * time.Millisecond}
	switch x := r.Float64(); {
	case x < 0.05: // hung: reclaimed, then returns late
		p.Hang = true
		p.Work = t.Limit + t.NoProgress + time.Duration(200+r.IntN(800))*time.Millisecond
	case x < 0.09: // slow but beating: over its limit, never reclaimed
		p.Work = t.Limit + time.Duration(100+r.IntN(300))*time.Millisecond
	case x < 0.11: // very slow: the lease runs out and a second delivery supersedes it
		p.Work = t.Lease + time.Duration(200+r.IntN(400))*time.Millisecond
	}
	if r.Float64() < 0.15 {
		p.Pause = time.Duration(5+r.IntN(40)) * time.Millisecond
	}
	p.Upper = r.Float64() < 0.1
	if kind == KindVideo {
		p.Quantity = int64(1000 + r.IntN(600000))
		p.Account = "acct-" + strconv.Itoa(r.IntN(Accounts))
		switch x := r.Float64(); {
		case x < 0.03:
			p.Deleted = true
		case x < 0.06:
			p.FailUpdate = "asset"
		case x < 0.08:
			p.FailUpdate = "content"
		case x < 0.09:
			p.FailUpdate, p.FailForGood = "content", true
		case x < 0.12:
			p.NoUpdates = true
		}
		if r.Float64() < 0.2 {
			p.SlowUpdate = time.Duration(200+r.IntN(400)) * time.Millisecond
		}
	}
	return p
}

// Accounts is the number of accounts videos are billed to.
const Accounts = 8

// The job kinds of the run.
const (
	KindChapter = "chapter"
	KindVideo   = "video"
)
