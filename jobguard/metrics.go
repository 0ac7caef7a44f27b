package jobguard

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/metrics"
)

// guardMetrics are a Guard's instruments and their prebuilt attribute sets.
type guardMetrics struct {
	completions metric.Int64Counter
	accepted    []metric.AddOption
	errored     []metric.AddOption
	refused     map[Reason][]metric.AddOption
}

// noGuardMetrics is what New gives every guard: no-op instruments.
var noGuardMetrics = newGuardMetrics(nil)

func newGuardMetrics(mp metric.MeterProvider) *guardMetrics {
	m := metrics.Meter(mp, "jobguard")
	refused := func(reason string) []metric.AddOption {
		return metrics.Add(metrics.KeyOutcome.String("refused"), metrics.KeyReason.String(reason))
	}
	g := &guardMetrics{
		completions: metrics.Counter(m, metrics.Completions, "{completion}",
			"Conditional completions, by outcome and the reason of a refusal."),
		accepted: metrics.Add(metrics.KeyOutcome.String("accepted")),
		errored:  metrics.Add(metrics.KeyOutcome.String("error")),
		refused: map[Reason][]metric.AddOption{
			ReasonUnknown:    refused("unknown"),
			ReasonNotFound:   refused("not_found"),
			ReasonStatus:     refused("terminal"),
			ReasonSuperseded: refused("superseded"),
			ReasonUnread:     refused("unread"),
		},
	}
	metrics.Zero(g.completions, g.accepted, g.errored)
	for _, opts := range g.refused {
		metrics.Zero(g.completions, opts)
	}
	return g
}

// completed counts the outcome of a conditional completion and returns err
// as it is.
func (m *guardMetrics) completed(ctx context.Context, err error) error {
	var se *StateError
	switch {
	case err == nil:
		m.completions.Add(ctx, 1, m.accepted...)
	case errors.As(err, &se) && errors.Is(err, ErrJobTerminal):
		m.completions.Add(ctx, 1, m.refused[se.Reason]...)
	default:
		m.completions.Add(ctx, 1, m.errored...)
	}
	return err
}

// startMetrics are a StartGuard's instruments and their prebuilt attribute
// sets.
type startMetrics struct {
	refusals     metric.Int64Counter
	lookupErrors metric.Int64Counter
	bySource     map[string][]metric.AddOption // "database", "marker"
	byLookup     map[string][]metric.AddOption // "database", "marker", with the guard's policy
}

func newStartMetrics(mp metric.MeterProvider, policy LookupPolicy) *startMetrics {
	m := metrics.Meter(mp, "jobguard")
	s := &startMetrics{
		refusals: metrics.Counter(m, metrics.StartRefusals, "{start}",
			"Starts refused because the job was reclaimed, by the evidence that refused it."),
		lookupErrors: metrics.Counter(m, metrics.StartLookupErrors, "{lookup}",
			"Start guard lookups that failed, by lookup and the policy applied."),
		bySource: map[string][]metric.AddOption{},
		byLookup: map[string][]metric.AddOption{},
	}
	for _, src := range []string{"database", "marker"} {
		s.bySource[src] = metrics.Add(metrics.KeySource.String(src))
		s.byLookup[src] = metrics.Add(metrics.KeyLookup.String(src), metrics.KeyPolicy.String(policy.String()))
		metrics.Zero(s.refusals, s.bySource[src])
		metrics.Zero(s.lookupErrors, s.byLookup[src])
	}
	return s
}

// checked counts a start guard refusal in err, if any, and returns err as
// it is.
func (m *startMetrics) checked(ctx context.Context, err error) error {
	var re *ReclaimedError
	if errors.As(err, &re) {
		m.refusals.Add(ctx, 1, m.bySource[re.Source]...)
	}
	return err
}

// lookupFailed counts a failed lookup ("database" or "marker").
func (m *startMetrics) lookupFailed(ctx context.Context, lookup string) {
	m.lookupErrors.Add(ctx, 1, m.byLookup[lookup]...)
}
