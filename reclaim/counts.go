package reclaim

// tally is one counter of a Report: the one place that says which
// decision it counts and what the counter is called in a metric label, in
// the sweep's log line and in an operator's table. Report's fields, the
// metric series, the summary line and the jobguard command all read
// tallies.
type tally struct {
	// decision is the sweep's decision the counter counts. The reclaim
	// decision has several, one for each thing that became of the reclaim
	// (reclaimed, lost the race, locked, a rule error, a shadow's would
	// reclaim, a paused type's, a braked sweep's), and so has the rescue
	// (rescued, a shadow's would rescue; its lost races and locked rows
	// count with the reclaim's); the marker and notice errors count none
	// (0).
	decision Decision
	// label is the value of the decision attribute of
	// jobguard.reclaim.decisions; "" for the counters that are metrics of
	// their own. For a decision other than reclaim, it is also the
	// decision's name (Decision.String).
	label string
	// key is the counter's attribute in the sweep's log line.
	key string
	// words name the counter for an operator.
	words string
	// shadow: only a shadow sweep or a Plan counts it, or a live sweep
	// for a type in ModeShadow.
	shadow bool
	// rare: the sweep's line and an operator's table show it only when it
	// counts something (a paused type, a braked sweep), so that the usual
	// line stays short.
	rare bool
	// count returns the counter in rep.
	count func(rep *Report) *int
}

// tallies are every counter of what became of a listed job, and the
// markers and notices that could not be sent, in the order the summary
// logs them.
var tallies = []tally{
	{DecisionReclaim, "would_reclaim", "would_reclaim", "would reclaim", true, false, func(r *Report) *int { return &r.WouldReclaim }},
	{DecisionReclaim, "reclaimed", "reclaimed", "reclaimed", false, false, func(r *Report) *int { return &r.Reclaimed }},
	{DecisionRescue, "would_rescue", "would_rescue", "would rescue", true, false, func(r *Report) *int { return &r.WouldRescue }},
	{DecisionRescue, "rescued", "rescued", "rescued", false, false, func(r *Report) *int { return &r.Rescued }},
	{DecisionReclaim, "braked", "braked", "braked", false, true, func(r *Report) *int { return &r.Braked }},
	{DecisionReclaim, "paused", "paused", "paused", false, true, func(r *Report) *int { return &r.Paused }},
	{DecisionWithinLimit, "within_limit", "within_limit", "within limit", false, false, func(r *Report) *int { return &r.WithinLimit }},
	{DecisionProgressing, "progressing", "progressing", "progressing", false, false, func(r *Report) *int { return &r.Progressing }},
	{DecisionStale, "stale", "stale", "stale", false, false, func(r *Report) *int { return &r.Stale }},
	{DecisionNotActive, "not_active", "not_active", "not active", false, false, func(r *Report) *int { return &r.NotActive }},
	{DecisionNoStartTime, "no_start_time", "no_start_time", "no start time", false, false, func(r *Report) *int { return &r.NoStartTime }},
	{DecisionUnknownType, "unknown_type", "unknown_type", "unknown type", false, false, func(r *Report) *int { return &r.UnknownType }},
	{DecisionSourceError, "source_error", "source_errors", "source errors", false, false, func(r *Report) *int { return &r.SourceErrors }},
	{DecisionReclaim, "lost_race", "lost_race", "lost race", false, false, func(r *Report) *int { return &r.LostRace }},
	{DecisionReclaim, "locked", "locked", "locked", false, false, func(r *Report) *int { return &r.Locked }},
	{DecisionReclaim, "rule_error", "rule_errors", "rule errors", false, false, func(r *Report) *int { return &r.RuleErrors }},
	{0, "", "marker_errors", "marker errors", false, false, func(r *Report) *int { return &r.MarkerErrors }},
	{0, "", "notice_errors", "notice errors", false, false, func(r *Report) *int { return &r.NoticeErrors }},
}

// decisionTally is the tally of each decision other than reclaim, whose
// outcomes are counted where the write reports them.
var decisionTally = func() map[Decision]*tally {
	m := map[Decision]*tally{}
	for i, t := range tallies {
		if t.decision != 0 && t.decision != DecisionReclaim && t.decision != DecisionRescue {
			m[t.decision] = &tallies[i]
		}
	}
	return m
}()

// Count is one counter of a Report, as the sweep's log line and an
// operator's table name it.
type Count struct {
	// Key is the counter's attribute in the sweep's log line, such as
	// "lost_race".
	Key string
	// Words name it for an operator, such as "lost race".
	Words string
	// Shadow reports that only a shadow sweep or a Plan counts it
	// (WouldReclaim), or a live sweep for a type in ModeShadow.
	Shadow bool
	// Rare reports that the sweep's line shows it only when it counts
	// something (Paused, Braked).
	Rare bool
	// N is the count.
	N int
}

// Counts returns the report's counters of what became of the listed jobs,
// then MarkerErrors and NoticeErrors, in the order of the sweep's log line.
// Scanned, Untyped and the id lists are not among them.
func (r Report) Counts() []Count {
	out := make([]Count, len(tallies))
	for i, t := range tallies {
		out[i] = Count{Key: t.key, Words: t.words, Shadow: t.shadow, Rare: t.rare, N: *t.count(&r)}
	}
	return out
}
