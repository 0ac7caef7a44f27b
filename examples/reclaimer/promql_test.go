package main

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// What the deploy tests read: the metric names and label matchers of a
// PromQL expression, the families of a Prometheus text page, and the
// instruments of docs/metrics.md. No PromQL parser is among the module's
// dependencies, so queryRefs reads just enough of the language for names;
// promtool checks the syntax (see deploy_test.go).

// docsPath is the metrics documentation, from this package's directory.
const docsPath = "../../docs/metrics.md"

// selector is one vector selector of an expression: a metric name (empty
// when the name is matched by __name__) and its label matchers.
type selector struct {
	Metric   string
	Matchers []matcher
}

// matcher is one label matcher, such as reason=~"terminal|superseded".
type matcher struct {
	Label, Op, Value string
}

// queryRefs is what an expression refers to: its selectors, and the labels
// it groups or matches by (by, without, on, ignoring, group_left,
// group_right).
type queryRefs struct {
	Selectors []selector
	Grouping  []string
}

// The identifiers that are not metrics: the keywords that take a list of
// label names, the other keywords, and the aggregations (which may stand
// before their by clause, not their arguments).
var (
	groupingKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
		"group_left": true, "group_right": true}
	otherKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"atan2": true, "inf": true, "nan": true}
	aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true,
		"stddev": true, "stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
		"quantile": true, "limitk": true, "limit_ratio": true}
)

// parseQuery returns what expr refers to. Grafana's variables ($job,
// ${datasource}, $__rate_interval) are skipped wherever they stand.
func parseQuery(expr string) (queryRefs, error) {
	r := queryReader{s: expr}
	for r.i < len(r.s) {
		if err := r.next(); err != nil {
			return r.refs, fmt.Errorf("%q: %w", expr, err)
		}
	}
	return r.refs, nil
}

// queryReader reads an expression from s[i:], token by token.
type queryReader struct {
	s    string
	i    int
	refs queryRefs
}

// next reads one token, and a selector's matchers with it.
func (r *queryReader) next() error {
	s, c := r.s, r.s[r.i]
	switch {
	case c == '"' || c == '\'' || c == '`':
		_, n, err := readString(s[r.i:])
		r.i += n
		return err
	case c == '[':
		return r.skipPast(']')
	case c == '$':
		if r.i++; r.i < len(s) && s[r.i] == '{' {
			return r.skipPast('}')
		}
		r.skipIdent()
	case c >= '0' && c <= '9' || c == '.':
		for r.i < len(s) && (isIdentByte(s[r.i], false) || s[r.i] == '.') {
			r.i++
		}
	case c == '{':
		return r.selector("")
	case isIdentByte(c, true):
		return r.word()
	default:
		r.i++
	}
	return nil
}

// word reads an identifier: a keyword (with its label list), a function
// or aggregation, or a metric's selector.
func (r *queryReader) word() error {
	start := r.i
	r.skipIdent()
	w := r.s[start:r.i]
	for r.i < len(r.s) && strings.ContainsRune(" \t\r\n", rune(r.s[r.i])) {
		r.i++
	}
	open := r.i < len(r.s) && r.s[r.i] == '('
	switch {
	case otherKeywords[w], aggregations[w]:
	case groupingKeywords[w]:
		if open {
			end := strings.IndexByte(r.s[r.i:], ')')
			if end < 0 {
				return fmt.Errorf("unterminated %s (", w)
			}
			for l := range strings.SplitSeq(r.s[r.i+1:r.i+end], ",") {
				if l = strings.TrimSpace(l); l != "" {
					r.refs.Grouping = append(r.refs.Grouping, l)
				}
			}
			r.i += end + 1
		}
	case open: // a function; its arguments follow
	case r.i < len(r.s) && r.s[r.i] == '{':
		return r.selector(w)
	default:
		r.refs.Selectors = append(r.refs.Selectors, selector{Metric: w})
	}
	return nil
}

// selector reads the matchers at s[i:] as metric's selector.
func (r *queryReader) selector(metric string) error {
	ms, n, err := readMatchers(r.s[r.i:])
	if err != nil {
		return err
	}
	r.i += n
	r.refs.Selectors = append(r.refs.Selectors, selector{Metric: metric, Matchers: ms})
	return nil
}

func (r *queryReader) skipPast(delim byte) error {
	end := strings.IndexByte(r.s[r.i:], delim)
	if end < 0 {
		return fmt.Errorf("unterminated %c", r.s[r.i])
	}
	r.i += end + 1
	return nil
}

func (r *queryReader) skipIdent() {
	for r.i < len(r.s) && isIdentByte(r.s[r.i], false) {
		r.i++
	}
}

func isIdentByte(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

// readMatchers reads {label op "value", ...} at the start of s and returns
// the matchers and the bytes read.
func readMatchers(s string) ([]matcher, int, error) {
	var ms []matcher
	i := 1 // past {
	for {
		for i < len(s) && strings.ContainsRune(" \t\r\n,", rune(s[i])) {
			i++
		}
		if i >= len(s) {
			return nil, 0, fmt.Errorf("unterminated {")
		}
		if s[i] == '}' {
			return ms, i + 1, nil
		}
		start := i
		for i < len(s) && isIdentByte(s[i], i == start) {
			i++
		}
		m := matcher{Label: s[start:i]}
		for i < len(s) && s[i] == ' ' {
			i++
		}
		for _, op := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(s[i:], op) {
				m.Op = op
				break
			}
		}
		if m.Label == "" || m.Op == "" {
			return nil, 0, fmt.Errorf("bad label matcher at %q", s[start:])
		}
		i += len(m.Op)
		for i < len(s) && s[i] == ' ' {
			i++
		}
		v, n, err := readString(s[i:])
		if err != nil {
			return nil, 0, err
		}
		m.Value = v
		i += n
		ms = append(ms, m)
	}
}

// readString reads the quoted string at the start of s and returns its
// value and the bytes read.
func readString(s string) (string, int, error) {
	if s == "" || !strings.ContainsRune("\"'`", rune(s[0])) {
		return "", 0, fmt.Errorf("want a quoted string at %q", s)
	}
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && q != '`' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case s[i] == q:
			return b.String(), i + 1, nil
		default:
			b.WriteByte(s[i])
		}
	}
	return "", 0, fmt.Errorf("unterminated string at %q", s)
}

// exposition is what a Prometheus text page holds: each family's TYPE,
// and the label names seen on each sample name.
type exposition struct {
	Types   map[string]string
	Samples map[string]map[string]bool
}

var (
	typeLine   = regexp.MustCompile(`^# TYPE (\S+) (\S+)$`)
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
)

// parseExposition reads pages of the Prometheus text format into one
// exposition.
func parseExposition(pages ...string) exposition {
	e := exposition{Types: map[string]string{}, Samples: map[string]map[string]bool{}}
	for _, page := range pages {
		for line := range strings.SplitSeq(page, "\n") {
			if m := typeLine.FindStringSubmatch(line); m != nil {
				e.Types[m[1]] = m[2]
				continue
			}
			m := sampleLine.FindStringSubmatch(line)
			if m == nil || strings.HasPrefix(line, "#") {
				continue
			}
			if e.Samples[m[1]] == nil {
				e.Samples[m[1]] = map[string]bool{}
			}
			for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
				e.Samples[m[1]][l[1]] = true
			}
		}
	}
	return e
}

// instrument is one row of the instrument table in docs/metrics.md.
type instrument struct {
	// Name is the OpenTelemetry name, such as jobguard.completions.
	Name string
	// Kind is counter, histogram, gauge or updowncounter.
	Kind string
	// Unit is the unit as documented, such as {completion} or s.
	Unit string
	// Attrs holds each documented attribute key's values.
	Attrs map[string][]string
}

// prometheusUnits are the unit suffixes the OpenTelemetry Prometheus
// exporter appends; a unit in braces is an annotation and adds none.
var prometheusUnits = map[string]string{"s": "_seconds", "ms": "_milliseconds", "By": "_bytes", "1": "_ratio"}

// family returns the name and TYPE of the Prometheus family the exporter
// makes of in: dots become underscores, the unit's suffix follows, and a
// counter ends in _total.
func (in instrument) family() (name, typ string, err error) {
	name = strings.ReplaceAll(in.Name, ".", "_")
	if !strings.HasPrefix(in.Unit, "{") && in.Unit != "" {
		suffix, ok := prometheusUnits[in.Unit]
		if !ok {
			return "", "", fmt.Errorf("%s: unit %q: add its Prometheus suffix to prometheusUnits", in.Name, in.Unit)
		}
		name += suffix
	}
	switch in.Kind {
	case "counter":
		return name + "_total", "counter", nil
	case "histogram":
		return name, "histogram", nil
	case "gauge", "updowncounter":
		return name, "gauge", nil
	}
	return "", "", fmt.Errorf("%s: kind %q: want counter, histogram, gauge or up-down counter", in.Name, in.Kind)
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	kindCell   = regexp.MustCompile("^(counter|histogram|gauge|up-?down ?counter)\\b[^`]*(?:`([^`]*)`)?")
)

// parseInstruments reads the instrument table of docs/metrics.md: the
// table whose header starts "| name | kind, unit | attributes |".
func parseInstruments(doc string) ([]instrument, error) {
	var out []instrument
	inTable := false
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(line, "| name | kind, unit | attributes |") {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(out) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")
		if len(cells) < 5 {
			return nil, fmt.Errorf("instrument row %q: want name, kind and unit, attributes, counts", line)
		}
		name := backticked.FindStringSubmatch(cells[1])
		kind := kindCell.FindStringSubmatch(strings.TrimSpace(cells[2]))
		if name == nil || kind == nil {
			return nil, fmt.Errorf("instrument row %q: want `name` and \"counter `{unit}`\"", line)
		}
		in := instrument{Name: name[1], Kind: strings.NewReplacer("-", "", " ", "").Replace(kind[1]), Unit: kind[2],
			Attrs: map[string][]string{}}
		for part := range strings.SplitSeq(cells[3], ";") {
			toks := backticked.FindAllStringSubmatch(part, -1)
			if len(toks) == 0 {
				continue // "—": no attributes
			}
			for _, v := range toks[1:] {
				in.Attrs[toks[0][1]] = append(in.Attrs[toks[0][1]], v[1])
			}
		}
		out = append(out, in)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no instrument table (a header starting \"| name | kind, unit | attributes |\")")
	}
	return out, nil
}

// targetLabels are the labels Prometheus adds to every series it scrapes;
// a query may match on them, but only with a dashboard variable.
var targetLabels = []string{"job", "instance"}

// checkQueries returns what is wrong with queries (name → PromQL) against
// the scrape got and the documented instruments: a metric or a label the
// scrape does not have, an attribute value docs/metrics.md does not list, a
// target label matched on a literal.
func checkQueries(queries map[string]string, docs []instrument, got exposition) []string {
	bySample := map[string]instrument{}
	for _, in := range docs {
		name, typ, err := in.family()
		if err != nil {
			continue // compareWithDocs reports it
		}
		bySample[name] = in
		if typ == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				bySample[name+s] = in
			}
		}
	}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(queries)) {
		q := queries[name]
		refs, err := parseQuery(q)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		labels := map[string]bool{}
		for _, l := range targetLabels {
			labels[l] = true
		}
		missing := false
		for _, sel := range refs.Selectors {
			var seen map[string]bool
			if sel.Metric == "" {
				seen = namedByRegex(name, sel, got, &problems)
			} else if seen = got.Samples[sel.Metric]; seen == nil {
				problems = append(problems, fmt.Sprintf("%s: %s is not in the service's scrape", name, sel.Metric))
				missing = true
				continue
			}
			for l := range seen {
				labels[l] = true
			}
			in := bySample[sel.Metric]
			for _, m := range sel.Matchers {
				problems = append(problems, checkMatcher(name, sel.Metric, m, seen, in)...)
			}
		}
		for _, l := range refs.Grouping {
			if !labels[l] && !missing { // a missing metric is reported once, not with its labels
				problems = append(problems, fmt.Sprintf("%s: groups by %q, which none of its metrics has", name, l))
			}
		}
	}
	return problems
}

// namedByRegex checks a selector without a metric name: its __name__
// matcher must match some family of the scrape. It returns the labels of
// the samples it matches.
func namedByRegex(query string, sel selector, got exposition, problems *[]string) map[string]bool {
	labels := map[string]bool{}
	for _, m := range sel.Matchers {
		if m.Label != "__name__" {
			continue
		}
		pattern := m.Value
		if !strings.HasSuffix(m.Op, "~") {
			pattern = regexp.QuoteMeta(pattern)
		}
		re, err := regexp.Compile("^(?:" + pattern + ")$")
		if err != nil {
			*problems = append(*problems, fmt.Sprintf("%s: __name__%s%q: %v", query, m.Op, m.Value, err))
			return labels
		}
		for s, ls := range got.Samples {
			if re.MatchString(s) == (m.Op == "=~" || m.Op == "=") {
				for l := range ls {
					labels[l] = true
				}
			}
		}
		if len(labels) == 0 {
			*problems = append(*problems, fmt.Sprintf("%s: __name__%s%q matches nothing in the service's scrape", query, m.Op, m.Value))
		}
		return labels
	}
	*problems = append(*problems, fmt.Sprintf("%s: a selector without a metric name or __name__ matcher", query))
	return labels
}

// literalAlternation matches a regular expression that is only a list of
// plain values, such as terminal|superseded.
var literalAlternation = regexp.MustCompile(`^[a-zA-Z0-9_-]+(\|[a-zA-Z0-9_-]+)*$`)

// checkMatcher checks one label matcher of metric: the label must be on
// the metric's samples (or be a target label, matched with a variable),
// and a value of a documented attribute must be documented.
func checkMatcher(query, metric string, m matcher, seen map[string]bool, in instrument) []string {
	switch {
	case m.Label == "__name__":
		return nil
	case slices.Contains(targetLabels, m.Label):
		if !strings.Contains(m.Value, "$") {
			return []string{fmt.Sprintf("%s: %s=%q is a hard-coded target; use a dashboard variable", query, m.Label, m.Value)}
		}
		return nil
	case !seen[m.Label]:
		have := strings.Join(slices.Sorted(maps.Keys(seen)), ", ")
		return []string{fmt.Sprintf("%s: %s has no label %q (it has %s)", query, metric, m.Label, have)}
	}
	documented, ok := in.Attrs[m.Label]
	if !ok || strings.Contains(m.Value, "$") {
		return nil
	}
	values := []string{m.Value}
	if strings.HasSuffix(m.Op, "~") {
		if !literalAlternation.MatchString(m.Value) {
			return nil
		}
		values = strings.Split(m.Value, "|")
	}
	var problems []string
	for _, v := range values {
		if !slices.Contains(documented, v) {
			problems = append(problems, fmt.Sprintf("%s: %s: %s=%q is not a documented value (%s)",
				query, metric, m.Label, v, strings.Join(documented, ", ")))
		}
	}
	return problems
}

// compareWithDocs returns where docs/metrics.md and the scrape got
// disagree: a documented instrument whose family the scrape lacks, or has
// with another TYPE or without a documented attribute, and a jobguard
// family the docs do not list.
func compareWithDocs(docs []instrument, got exposition) []string {
	var problems []string
	documented := map[string]bool{}
	for _, in := range docs {
		name, typ, err := in.family()
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		documented[name] = true
		switch gotType, ok := got.Types[name]; {
		case !ok:
			problems = append(problems, fmt.Sprintf("docs/metrics.md lists %s, but the scrape has no %s: record it in drivenScrape", in.Name, name))
			continue
		case gotType != typ:
			problems = append(problems, fmt.Sprintf("%s is a %s in the scrape, documented as a %s", name, gotType, in.Kind))
		}
		sample := name
		if typ == "histogram" {
			sample += "_count"
		}
		for _, key := range slices.Sorted(maps.Keys(in.Attrs)) {
			if !got.Samples[sample][key] {
				problems = append(problems, fmt.Sprintf("%s: documented attribute %q is on none of its samples", name, key))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got.Types)) {
		if strings.HasPrefix(name, "jobguard_") && !documented[name] {
			problems = append(problems, fmt.Sprintf("the scrape has %s, which docs/metrics.md does not list", name))
		}
	}
	return problems
}

func TestParseQuery_ReadsSelectorsAndGrouping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr     string
		want     []selector
		grouping []string
	}{
		{
			expr: `sum by (job, reason) (increase(jobguard_completions_total{outcome="refused", reason=~"terminal|superseded"}[15m])) > 0`,
			want: []selector{{Metric: "jobguard_completions_total", Matchers: []matcher{
				{"outcome", "=", "refused"}, {"reason", "=~", "terminal|superseded"}}}},
			grouping: []string{"job", "reason"},
		},
		{
			expr:     `histogram_quantile(0.99, sum(rate(a_bucket{job=~"$job"}[$__rate_interval])) by (le)) / ignoring (x) b offset 1h`,
			want:     []selector{{Metric: "a_bucket", Matchers: []matcher{{"job", "=~", "$job"}}}, {Metric: "b"}},
			grouping: []string{"le", "x"},
		},
		{
			expr:     `count by (job) ({__name__=~"jobguard_.+"}) or absent(c) and on() vector(1)`,
			want:     []selector{{Matchers: []matcher{{"__name__", "=~", "jobguard_.+"}}}, {Metric: "c"}},
			grouping: []string{"job"},
		},
		{
			expr: `label_replace(d{a="x\"y"}, "dst", "$1", "src", "(.*)") * 60`,
			want: []selector{{Metric: "d", Matchers: []matcher{{"a", "=", `x"y`}}}},
		},
	} {
		got, err := parseQuery(tc.expr)
		require.NoError(t, err, tc.expr)
		require.Equal(t, tc.want, got.Selectors, tc.expr)
		require.Equal(t, tc.grouping, got.Grouping, tc.expr)
	}
	for _, bad := range []string{`a{b="c"`, `a{b~"c"}`, `a{b="c}`, `rate(a[5m)`} {
		_, err := parseQuery(bad)
		require.Error(t, err, bad)
	}
}

// The checker finds each kind of wrong reference on a small scrape; the
// deploy test runs it on the service's real one.
func TestCheckQueries_ReportsWhatTheScrapeDoesNotHave(t *testing.T) {
	t.Parallel()
	page := `# TYPE jobguard_reclaim_decisions_total counter
jobguard_reclaim_decisions_total{decision="reclaimed",otel_scope_name="x"} 1
# TYPE jobguard_reclaim_sweep_duration_seconds histogram
jobguard_reclaim_sweep_duration_seconds_bucket{result="ok",le="0.005"} 1
jobguard_reclaim_sweep_duration_seconds_sum{result="ok"} 0.001
jobguard_reclaim_sweep_duration_seconds_count{result="ok"} 1
`
	docs := []instrument{
		{Name: "jobguard.reclaim.decisions", Kind: "counter", Unit: "{job}",
			Attrs: map[string][]string{"decision": {"reclaimed", "stale", "locked"}}},
		{Name: "jobguard.reclaim.sweep.duration", Kind: "histogram", Unit: "s",
			Attrs: map[string][]string{"result": {"ok", "error"}}},
	}
	got := parseExposition(page)
	require.Empty(t, compareWithDocs(docs, got))
	for _, tc := range []struct {
		expr string
		want string // "" when the query is right
	}{
		{`sum by (decision) (rate(jobguard_reclaim_decisions_total{job=~"$job", decision=~"reclaimed|locked"}[5m]))`, ""},
		{`histogram_quantile(0.99, sum by (le) (rate(jobguard_reclaim_sweep_duration_seconds_bucket[5m])))`, ""},
		{`count by (job) ({__name__=~"jobguard_.+"})`, ""},
		{`rate(jobguard_reclaim_decision_total[5m])`, `jobguard_reclaim_decision_total is not in the service's scrape`},
		{`rate(jobguard_reclaim_sweep_duration_seconds[5m])`, `jobguard_reclaim_sweep_duration_seconds is not in the service's scrape`},
		{`rate(jobguard_reclaim_decisions_total{decision="reclamed"}[5m])`, `decision="reclamed" is not a documented value (reclaimed, stale, locked)`},
		{`rate(jobguard_reclaim_decisions_total{decision=~"stale|lost"}[5m])`, `decision="lost" is not a documented value`},
		{`rate(jobguard_reclaim_decisions_total{decison="stale"}[5m])`, `has no label "decison"`},
		{`rate(jobguard_reclaim_decisions_total{instance="host-1:9464"}[5m])`, `instance="host-1:9464" is a hard-coded target`},
		{`sum by (reason) (rate(jobguard_reclaim_decisions_total[5m]))`, `groups by "reason", which none of its metrics has`},
		{`count({__name__=~"river_.+"})`, `matches nothing in the service's scrape`},
		{`count({job="$job"})`, `without a metric name or __name__ matcher`},
	} {
		problems := checkQueries(map[string]string{"q": tc.expr}, docs, got)
		if tc.want == "" {
			require.Empty(t, problems, tc.expr)
			continue
		}
		require.Len(t, problems, 1, tc.expr)
		require.Contains(t, problems[0], tc.want)
	}
}

// The docs and a scrape disagree in every way compareWithDocs names.
func TestCompareWithDocs_ReportsEachDisagreement(t *testing.T) {
	t.Parallel()
	got := parseExposition(`# TYPE jobguard_completions_total counter
jobguard_completions_total{outcome="accepted"} 1
# TYPE jobguard_start_refusals gauge
jobguard_start_refusals{source="marker"} 1
# TYPE jobguard_extra_total counter
jobguard_extra_total 1
# TYPE target_info gauge
target_info{service_name="reclaimer"} 1
`)
	problems := compareWithDocs([]instrument{
		{Name: "jobguard.completions", Kind: "counter", Attrs: map[string][]string{"outcome": {"accepted"}, "reason": {"terminal"}}},
		{Name: "jobguard.start.refusals", Kind: "counter"},
		{Name: "jobguard.heartbeat.beats", Kind: "counter"},
		{Name: "jobguard.settle.duration", Kind: "histogram", Unit: "min"},
	}, got)
	require.Equal(t, []string{
		`jobguard_completions_total: documented attribute "reason" is on none of its samples`,
		`docs/metrics.md lists jobguard.start.refusals, but the scrape has no jobguard_start_refusals_total: record it in drivenScrape`,
		`docs/metrics.md lists jobguard.heartbeat.beats, but the scrape has no jobguard_heartbeat_beats_total: record it in drivenScrape`,
		`jobguard.settle.duration: unit "min": add its Prometheus suffix to prometheusUnits`,
		`the scrape has jobguard_extra_total, which docs/metrics.md does not list`,
		`the scrape has jobguard_start_refusals, which docs/metrics.md does not list`,
	}, problems)
}

// The instrument table of docs/metrics.md reads into names, kinds, units
// and attribute values.
func TestParseInstruments_ReadsTheDocsTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(docsPath)
	require.NoError(t, err)
	docs, err := parseInstruments(string(doc))
	require.NoError(t, err)
	byName := map[string]instrument{}
	for _, in := range docs {
		byName[in.Name] = in
	}
	require.Equal(t, instrument{Name: "jobguard.completions", Kind: "counter", Unit: "{completion}",
		Attrs: map[string][]string{"outcome": {"accepted", "refused", "error"},
			"reason": {"terminal", "superseded", "not_found", "unread", "unknown"}}}, byName["jobguard.completions"])
	require.Equal(t, instrument{Name: "jobguard.reclaim.sweep.duration", Kind: "histogram", Unit: "s",
		Attrs: map[string][]string{"result": {"ok", "error"}}}, byName["jobguard.reclaim.sweep.duration"])
	require.Equal(t, map[string][]string{}, byName["jobguard.reclaim.marker_errors"].Attrs)
	require.Contains(t, byName["jobguard.reclaim.decisions"].Attrs["decision"], "rule_error")

	_, err = parseInstruments("# Metrics\n\nno table here\n")
	require.Error(t, err)
}
