package reclaim

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// The defaults of SuggestSpec.
const (
	// SuggestWindowDefault is how far back Suggest reads finished jobs.
	SuggestWindowDefault = 7 * 24 * time.Hour
	// SuggestPerTypeDefault is how many of each type's latest finished jobs
	// Suggest reads at most.
	SuggestPerTypeDefault = 10_000
	// SuggestPercentileDefault is the percentile of the completions'
	// runtimes a suggestion starts from.
	SuggestPercentileDefault = 0.99
	// SuggestMarginDefault is what the percentile is multiplied by.
	SuggestMarginDefault = 1.5
	// SuggestMinCompletionsDefault is the fewest completions a suggestion
	// is not Tentative on: below a hundred, the default percentile (p99)
	// is the longest completion or an interpolation next to it, not a
	// tail that was seen.
	SuggestMinCompletionsDefault = 100
)

// SuggestSpec says which history Suggest reads and how it suggests.
type SuggestSpec struct {
	// Types are the job types to suggest limits for. Defaults to the types
	// of the current limits, of the active jobs, and of the jobs that
	// finished within Window: on a first adoption, with no limit set and
	// no job running, every type with history.
	Types []string
	// Window keeps the jobs that finished within it. Defaults to
	// SuggestWindowDefault (7 days).
	Window time.Duration
	// PerType keeps at most each type's latest PerType finished jobs.
	// Defaults to SuggestPerTypeDefault.
	PerType int
	// Percentile, above 0 and at most 1, of the completions' runtimes is
	// where a suggestion starts. Defaults to SuggestPercentileDefault.
	Percentile float64
	// Margin multiplies the percentile; at least 1. Defaults to
	// SuggestMarginDefault.
	Margin float64
	// BelowLongest lets a suggestion fall below the longest completion
	// seen, which a limit would have put at risk. Defaults to false: never
	// below it.
	BelowLongest bool
	// MinCompletions is the fewest completions a suggestion rests on and
	// is not Tentative. Defaults to SuggestMinCompletionsDefault.
	MinCompletions int
}

// Suggestion is the evidence of one job type and the limit it suggests.
type Suggestion struct {
	jobset.TypeHistory
	// Limit is the type's current limit; zero when it has none. OverLimit
	// counts the completions that ran longer.
	Limit time.Duration
	// Suggested is the runtime at Percentile times Margin, rounded up to
	// the second, and never below the longest completion unless
	// BelowLongest. Zero when the type has no completion to judge from.
	Suggested time.Duration
	// Tentative is true when Suggested rests on fewer completions than
	// SuggestSpec.MinCompletions (Completed says how many): a first
	// guess, to be read before it is applied.
	Tentative bool
}

// Suggest reads the history of the finished jobs (jobguard's
// jobset.Set.History: per type, one index range of the latest finished jobs
// within the window) and suggests a limit for each type from the runtimes
// of its completions. It writes nothing; TableLimits.Set applies a
// suggestion.
func (r *Reclaimer) Suggest(ctx context.Context, spec SuggestSpec) ([]Suggestion, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("reclaim: suggest: %w", err)
	}
	limits, err := r.cfg.Limits.Limits(ctx)
	if err != nil {
		return nil, fmt.Errorf("reclaim: suggest: %w", err)
	}
	types := spec.Types
	// wanted are the types listed even without history in the window:
	// those named, limited or running. A type that only finished before
	// the window has nothing to suggest from and is left out.
	wanted := map[string]bool{}
	if len(types) == 0 {
		active, err := jobset.New(r.cfg.Guard).ActiveTypes(ctx, r.cfg.DB)
		if err != nil {
			return nil, fmt.Errorf("reclaim: suggest: %w", err)
		}
		finished, err := jobset.New(r.cfg.Guard).FinishedTypes(ctx, r.cfg.DB)
		if err != nil {
			return nil, fmt.Errorf("reclaim: suggest: %w", err)
		}
		types = append(slices.Collect(maps.Keys(limits)), active...)
		for _, t := range types {
			wanted[t] = true
		}
		types = append(types, finished...)
		slices.Sort(types)
		types = slices.Compact(types)
	} else {
		for _, t := range types {
			wanted[t] = true
		}
	}
	if len(types) == 0 {
		return nil, nil
	}
	q := jobset.HistoryQuery{Limits: make(map[string]time.Duration, len(types)), Window: spec.Window,
		PerType: spec.PerType, Percentile: spec.Percentile}
	for _, t := range types {
		q.Limits[t] = limits[t]
	}
	hs, err := jobset.New(r.cfg.Guard).History(ctx, r.cfg.DB, q)
	if err != nil {
		return nil, fmt.Errorf("reclaim: suggest: %w", err)
	}
	out := make([]Suggestion, 0, len(hs))
	for _, h := range hs {
		if !wanted[h.Type] && h.Completed+h.Reclaimed+h.Failed == 0 {
			continue
		}
		out = append(out, Suggestion{TypeHistory: h, Limit: limits[h.Type], Suggested: spec.suggest(h),
			Tentative: h.Completed > 0 && h.Completed < spec.MinCompletions})
	}
	return out, nil
}

// withDefaults fills in and checks the spec. Errors name the field.
func (s SuggestSpec) withDefaults() (SuggestSpec, error) {
	if s.Window == 0 {
		s.Window = SuggestWindowDefault
	}
	if s.PerType == 0 {
		s.PerType = SuggestPerTypeDefault
	}
	if s.Percentile == 0 {
		s.Percentile = SuggestPercentileDefault
	}
	if s.Margin == 0 {
		s.Margin = SuggestMarginDefault
	}
	if s.MinCompletions == 0 {
		s.MinCompletions = SuggestMinCompletionsDefault
	}
	switch {
	case s.Window < 0:
		return s, fmt.Errorf("Window %v is negative", s.Window)
	case s.PerType < 0:
		return s, fmt.Errorf("PerType %d is negative", s.PerType)
	case s.MinCompletions < 0:
		return s, fmt.Errorf("MinCompletions %d is negative", s.MinCompletions)
	case !(s.Percentile > 0 && s.Percentile <= 1):
		return s, fmt.Errorf("Percentile %v is not in (0, 1]", s.Percentile)
	case !(s.Margin >= 1) || math.IsInf(s.Margin, 1):
		return s, fmt.Errorf("Margin %v is below 1", s.Margin)
	}
	return s, nil
}

// suggest is the limit h suggests under s.
func (s SuggestSpec) suggest(h jobset.TypeHistory) time.Duration {
	if h.Completed == 0 {
		return 0
	}
	// A long runtime times a large margin is the longest limit, never a
	// float converted past the range of a duration, which wraps.
	d := suggestMax
	if f := math.Ceil(float64(h.AtPercentile) * s.Margin); f < float64(suggestMax) {
		d = time.Duration(f)
	}
	if !s.BelowLongest {
		d = max(d, h.Max)
	}
	if r := d % time.Second; r != 0 {
		d = interval.Sum(d, time.Second-r)
	}
	return min(d, suggestMax)
}

// suggestMax is the longest suggestion: the longest limit, in whole
// seconds.
const suggestMax = LimitMax / time.Second * time.Second
