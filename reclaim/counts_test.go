package reclaim

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// allDecisions is every Decision, from the first to the last constant.
func allDecisions() []Decision {
	var out []Decision
	for d := DecisionSourceError; d <= DecisionRescue; d++ {
		out = append(out, d)
	}
	return out
}

// TestTallies_EveryDecisionOnce: every decision but reclaim has exactly one
// counter, its name is its label, and the reclaim decision's outcomes are
// counted apart; no label or log key names two counters.
func TestTallies_EveryDecisionOnce(t *testing.T) {
	t.Parallel()
	seen := map[Decision]int{}
	labels, keys, words := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, tl := range tallies {
		seen[tl.decision]++
		require.False(t, keys[tl.key], "log key %q twice", tl.key)
		require.False(t, words[tl.words], "words %q twice", tl.words)
		keys[tl.key], words[tl.words] = true, true
		if tl.label != "" {
			require.False(t, labels[tl.label], "label %q twice", tl.label)
			labels[tl.label] = true
		}
		require.Equal(t, tl.decision == 0, tl.label == "", "%s: a counter of no decision is a metric of its own", tl.key)
	}
	for _, d := range allDecisions() {
		if d == DecisionReclaim {
			require.Equal(t, 7, seen[d], "reclaimed, would reclaim, braked, paused, lost race, locked, rule errors")
			require.Equal(t, "reclaim", d.String())
			continue
		}
		if d == DecisionRescue {
			require.Equal(t, 2, seen[d], "rescued, would rescue")
			require.Equal(t, "rescue", d.String())
			continue
		}
		require.Equal(t, 1, seen[d], "%s", d)
		require.Equal(t, decisionTally[d].label, d.String())
	}
	require.Equal(t, "undecided", Decision(0).String())
	require.Equal(t, "undecided", (DecisionRescue + 1).String())
}

// TestTallies_EveryReportCounterOnce: every int field of Report but
// Scanned and Untyped (a part of UnknownType) is exactly one tally's
// counter, so a counter added to Report is neither logged nor labelled
// until it has its tally.
func TestTallies_EveryReportCounterOnce(t *testing.T) {
	t.Parallel()
	var rep Report
	v := reflect.ValueOf(&rep).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.Int || f.Name == "Scanned" || f.Name == "Untyped" {
			continue
		}
		field := v.Field(i).Addr().Interface().(*int)
		n := 0
		for _, tl := range tallies {
			if tl.count(&rep) == field {
				n++
			}
		}
		require.Equal(t, 1, n, "Report.%s", f.Name)
	}
}

func TestReportCounts(t *testing.T) {
	t.Parallel()
	rep := Report{Scanned: 99, Reclaimed: 1, LostRace: 2, NoticeErrors: 3, WouldReclaim: 4}
	got := map[string]int{}
	for _, c := range rep.Counts() {
		got[c.Key] = c.N
		require.Equal(t, c.Key == "would_reclaim" || c.Key == "would_rescue", c.Shadow, c.Key)
	}
	require.Len(t, got, len(tallies))
	require.Equal(t, map[string]int{"reclaimed": 1, "lost_race": 2, "notice_errors": 3, "would_reclaim": 4},
		map[string]int{"reclaimed": got["reclaimed"], "lost_race": got["lost_race"],
			"notice_errors": got["notice_errors"], "would_reclaim": got["would_reclaim"]})
	require.Zero(t, got["within_limit"])
}
