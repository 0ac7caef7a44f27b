package flow

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// ParentRules are the examples' parent rules, for reclaim.Config.OnReclaim:
// a reclaimed chapter job fails its course, a reclaimed video job fails its
// video, and a reclaimed export fails only the export status of its
// document, which stays READY. Each moves its parent only from the states a
// running job leaves it in, so a parent that another job finished meanwhile
// keeps its state.
func ParentRules() (map[string]reclaim.ParentRule, error) {
	rules := map[string]reclaim.ParentRule{}
	for typ, p := range map[string]reclaim.ParentUpdate{
		TypeChapter: {Table: "courses", Column: "status", Value: "FAILED", From: []string{"DRAFT", "GENERATING"}},
		TypeVideo:   {Table: "videos", Column: "status", Value: "FAILED", From: []string{"DRAFT", "ENCODING"}},
		TypeExport:  {Table: "documents", Column: "export_status", Value: "FAILED", From: []string{"QUEUED"}},
	} {
		rule, err := reclaim.SetParent(p)
		if err != nil {
			return nil, fmt.Errorf("parent rule of %s: %w", typ, err)
		}
		rules[typ] = rule
	}
	return rules, nil
}

// SetLimit stores the maximum runtime of a job type in the job_type_limits
// table, through reclaim.TableLimits.Set; the next sweep uses it.
func SetLimit(ctx context.Context, db jobguard.DB, jobType string, limit time.Duration) error {
	limits, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: db})
	if err != nil {
		return fmt.Errorf("set limit of %s: %w", jobType, err)
	}
	if err := limits.Set(ctx, jobType, limit); err != nil {
		return fmt.Errorf("set limit of %s: %w", jobType, err)
	}
	return nil
}

// Beside is what an example command needs to show a reclaim in one
// process: the runtime limit of its job type, and optionally a reclaimer
// running beside its worker (in production, examples/reclaimer runs apart).
type Beside struct {
	// Limit is the job type's maximum runtime, written to job_type_limits.
	Limit time.Duration
	// NoProgress is the reclaimer's no-progress threshold.
	NoProgress time.Duration
	// Interval is the reclaimer's pause between sweeps.
	Interval time.Duration
	// Reclaim runs the reclaimer in this process.
	Reclaim bool
}

// Flags registers the flags of b.
func (b *Beside) Flags(fs *flag.FlagSet) {
	fs.DurationVar(&b.Limit, "limit", 30*time.Minute, "maximum runtime of the job type (stored in job_type_limits)")
	fs.BoolVar(&b.Reclaim, "reclaim", false, "also run a reclaimer in this process (normally examples/reclaimer does)")
	fs.DurationVar(&b.NoProgress, "no-progress", reclaim.NoProgressDefault, "the in-process reclaimer's no-progress threshold")
	fs.DurationVar(&b.Interval, "interval", 250*time.Millisecond, "the in-process reclaimer's pause between sweeps")
}
