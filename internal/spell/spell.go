// Package spell finds, among the names a program knows, those a mistyped
// name most likely meant: the one place jobguard and its command decide
// what "did you mean" offers, for a command, a flag, a table or a column.
package spell

import (
	"fmt"
	"slices"
	"strings"
)

// maxSuggestions is the most names Suggest returns.
const maxSuggestions = 3

// Suggest returns the names of known that given most likely meant, best
// first, at most three; none when nothing is close. A name equal to given
// but for letter case, or for the double quotes SQL would put around it,
// is the answer alone: PostgreSQL folds an unquoted name to lower case,
// so "coursejob" is how "CourseJob" reads unquoted. Otherwise the names
// within a small edit distance (insertions, deletions, substitutions and
// swaps of two neighbours, ignoring case; at most one edit for a name of
// up to five letters, two beyond) are returned, the nearest first. given
// itself, when known holds it, is not suggested, and nothing is
// suggested for an empty name.
func Suggest(given string, known []string) []string {
	bare := strings.ToLower(strings.Trim(given, `"`))
	if bare == "" {
		return nil
	}
	var folded []string
	for _, k := range known {
		if k != given && strings.ToLower(k) == bare {
			folded = append(folded, k)
		}
	}
	if len(folded) > 0 {
		slices.Sort(folded)
		return folded[:min(len(folded), maxSuggestions)]
	}
	limit := 1
	if len([]rune(bare)) > 5 {
		limit = 2
	}
	type near struct {
		name string
		d    int
	}
	var found []near
	for _, k := range known {
		if k == given {
			continue
		}
		if d := distance(bare, strings.ToLower(k)); d <= limit {
			found = append(found, near{k, d})
		}
	}
	slices.SortFunc(found, func(a, b near) int {
		if a.d != b.d {
			return a.d - b.d
		}
		return strings.Compare(a.name, b.name)
	})
	out := make([]string, 0, min(len(found), maxSuggestions))
	for _, n := range found[:min(len(found), maxSuggestions)] {
		out = append(out, n.name)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// distance is the optimal string alignment distance of a and b, by rune:
// the fewest insertions, deletions, substitutions and swaps of adjacent
// runes that turn one into the other (no rune edited twice).
func distance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// rows i-2, i-1 and i of the table d[i][j], the distance of s[:i] and t[:j].
	prev2, prev, cur := make([]int, len(t)+1), make([]int, len(t)+1), make([]int, len(t)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(s); i++ {
		cur[0] = i
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(t)]
}

// DidYouMean is "; did you mean A or B?" for names, each printed with
// format (such as "%q", or "--%s" for flags); "" for none. It is meant to
// end an error's message.
func DidYouMean(names []string, format string) string {
	if len(names) == 0 {
		return ""
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf(format, n)
	}
	return "; did you mean " + strings.Join(parts, " or ") + "?"
}

// Hint is DidYouMean of the names Suggest finds for given among known.
func Hint(given string, known []string, format string) string {
	return DidYouMean(Suggest(given, known), format)
}
