package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jobguard/jobguard/reclaim"
)

// whereLimits are the flags of the commands that only read or write the
// limits table: the common ones, of which they read the database and the
// limits table's place, and --json.
func whereLimits(f *flags, s *settings) {
	f.commonGroups(s)
	f.outputGroup(s, false)
}

var limitsListCommand = &command{
	name:  "limits list",
	short: "the runtime limit of each job type",
	long: `
List prints the runtime limit of each job type from the limits table, which
the reclaimer reads at every sweep. A job whose type has no limit is never
reclaimed. When a type is paused or in shadow ('jobguard limits pause'), a
MODE column says so (and --json a "mode").`,
	flags: whereLimits,
	run:   limitsList,
}

var limitsSetCommand = &command{
	name:  "limits set",
	args:  "<type> <duration>",
	short: "set the runtime limit of a job type",
	long: `
Set stores the runtime limit of a job type (reclaim.TableLimits.Set), such
as "45m" or "1h30m"; the next sweep uses it. A job is reclaimed only when
its current attempt has run longer than this AND its progress column has
not moved for the no-progress threshold. 'jobguard limits suggest' reads a
limit from the runtimes of finished jobs. On a table without a type column
every job has the type "": set its limit with 'jobguard limits set "" 30m'.`,
	flags: whereLimits,
	run:   limitsSet,
}

var limitsPauseCommand = &command{
	name:  "limits pause",
	args:  "<type>",
	short: "stop reclaiming a job type (--shadow: decide and count, write nothing)",
	long: `
Pause switches a job type off in the limits table (reclaim.TableLimits.
SetMode, mode off): from the next sweep, no job of the type is reclaimed
automatically; the jobs a sweep would have reclaimed are counted as paused
(the decision paused of jobguard_reclaim_decisions_total). Its limit stays.
Pause a type while its workers are known to be stalled for a reason of their
own (a service they call is down), when failing their jobs would throw work
away; 'jobguard limits resume' switches it back.

With --shadow the type is put in shadow instead (mode shadow): sweeps decide
its jobs as ever, count and log those they would reclaim (would_reclaim),
and write nothing, as 'jobguard run --shadow' does for every type. For a
type whose limit was just set or lowered.

The type must have a limit; the mode column comes with reclaim's second
migration file (reclaim/migrations/0002_job_type_limits_mode.sql).`,
	flags: func(f *flags, s *settings) {
		f.section("Pause")
		f.boolean(&s.Shadow, "shadow", "put the type in shadow: decide and count, write nothing")
		whereLimits(f, s)
	},
	run: limitsPause,
}

var limitsResumeCommand = &command{
	name:  "limits resume",
	args:  "<type>",
	short: "reclaim a paused or shadowed job type again",
	long: `
Resume switches a job type back to mode reclaim in the limits table
(reclaim.TableLimits.SetMode): the next sweep reclaims its jobs over their
limit without progress again.`,
	flags: whereLimits,
	run:   limitsResume,
}

func limitsPause(ctx context.Context, c *cli, s *settings, args []string) error {
	mode := reclaim.ModeOff
	if s.Shadow {
		mode = reclaim.ModeShadow
	}
	return setMode(ctx, c, s, args, "pause", mode)
}

func limitsResume(ctx context.Context, c *cli, s *settings, args []string) error {
	return setMode(ctx, c, s, args, "resume", reclaim.ModeReclaim)
}

// setMode sets the mode of the one type args name, and says what the
// next sweep does.
func setMode(ctx context.Context, c *cli, s *settings, args []string, verb string, mode reclaim.Mode) error {
	if len(args) != 1 {
		return usageErr("limits %s takes a job type, such as: limits %s chapter", verb, verb)
	}
	typ := args[0]
	cn, tl, _, err := c.openLimits(ctx, s)
	if err != nil {
		return err
	}
	defer cn.close()
	if err := tl.SetMode(ctx, typ, mode); err != nil {
		if errors.Is(err, reclaim.ErrNoLimit) {
			return fail(exitError, err, "set its limit first with 'jobguard limits set %s <duration>'", typ)
		}
		return limitsErr(err, s)
	}
	if s.JSON {
		return printJSON(c.stdout, struct {
			Type string `json:"type"`
			Mode string `json:"mode"`
		}{typ, string(mode)})
	}
	switch mode {
	case reclaim.ModeOff:
		fmt.Fprintf(c.stdout, "Type %q paused (mode off) in %s: no sweep reclaims its jobs until 'jobguard limits resume %s'.\n",
			typ, limitsName(s), typ)
	case reclaim.ModeShadow:
		fmt.Fprintf(c.stdout, "Type %q in shadow (mode shadow) in %s: sweeps count and log its jobs they would reclaim, "+
			"and write nothing, until 'jobguard limits resume %s'.\n", typ, limitsName(s), typ)
	default:
		fmt.Fprintf(c.stdout, "Type %q resumed (mode reclaim) in %s: the next sweep reclaims its stuck jobs.\n", typ, limitsName(s))
	}
	return nil
}

// modeText says a type's mode in a limits listing; "" for reclaim.
func modeText(m reclaim.Mode) string {
	switch m {
	case reclaim.ModeOff:
		return "off (paused)"
	case reclaim.ModeShadow:
		return "shadow (counted, not written)"
	}
	return string(m)
}

var limitsSuggestCommand = &command{
	name:  "limits suggest",
	short: "suggest limits from the runtimes of finished jobs; --apply sets them",
	long: `
Suggest reads, per job type, the runtimes of the latest finished jobs within
--window (jobset's Set.History: from the started-at column to the
updated-at column of COMPLETED jobs) and suggests a limit: the runtime at
--percentile times --margin, never below the longest completion unless
--below-longest (reclaim.Reclaimer.Suggest). It prints, per type: the
completions read, p50, p90, p99 and the longest, how many completions ran
over the current limit (work a reclaimer with that limit could have thrown
away), how many jobs were reclaimed, the current limit and the suggestion.

A suggestion that rests on fewer than --min-completions completions is
marked "(tentative)", and a warning under the table says how many: read it
as a first guess before applying it.

It writes nothing unless --apply, which sets every suggestion that differs
from the current limit (reclaim.TableLimits.Set). The types are those with
a limit, an active job or a job finished within --window (on a first
adoption, with no limit set and no job running: every type with history),
unless --types names them. It needs the started-at column.`,
	flags: func(f *flags, s *settings) {
		sp := &s.Suggest
		f.section("Suggest")
		f.boolean(&sp.Apply, "apply", "set each suggested limit that differs from the current one")
		f.float(&sp.Spec.Percentile, "percentile", "percentile of the completions' runtimes a suggestion starts from, in (0, 1]")
		f.float(&sp.Spec.Margin, "margin", "what the percentile is multiplied by, at least 1")
		f.duration(&sp.Spec.Window, "window", "read the jobs finished within this long")
		f.integer(&sp.Spec.PerType, "per-type", "read at most this many of each type's latest finished jobs")
		f.boolean(&sp.Spec.BelowLongest, "below-longest", "let a suggestion fall below the longest completion")
		f.integer(&sp.Spec.MinCompletions, "min-completions", "warn of a suggestion that rests on fewer completions than this")
		f.fs.Var(listFlag{&sp.Spec.Types}, "types", "only these job types, comma-separated (empty: those with a limit or an active job)")
		f.add("types")
		f.commonGroups(s)
		f.outputGroup(s, false)
	},
	run: limitsSuggest,
}

// suggestOpts are the options of limits suggest.
type suggestOpts struct {
	Spec  reclaim.SuggestSpec
	Apply bool
}

func defaultSuggest() suggestOpts {
	return suggestOpts{Spec: reclaim.SuggestSpec{Window: reclaim.SuggestWindowDefault, PerType: reclaim.SuggestPerTypeDefault,
		Percentile: reclaim.SuggestPercentileDefault, Margin: reclaim.SuggestMarginDefault,
		MinCompletions: reclaim.SuggestMinCompletionsDefault}}
}

// limitJSON is one limit, as --json prints it.
type limitJSON struct {
	Type         string  `json:"type"`
	Limit        string  `json:"limit"`
	LimitSeconds float64 `json:"limit_seconds"`
	// Mode is the type's mode when it is paused ("off") or in shadow;
	// absent when it reclaims.
	Mode string `json:"mode,omitempty"`
}

func limitsList(ctx context.Context, c *cli, s *settings, _ []string) error {
	cn, tl, _, err := c.openLimits(ctx, s)
	if err != nil {
		return err
	}
	defer cn.close()
	limits, modes, err := tl.LimitsAndModes(ctx)
	if err != nil {
		return limitsErr(err, s)
	}
	types := slices.Sorted(maps.Keys(limits))
	if s.JSON {
		out := make([]limitJSON, len(types))
		for i, typ := range types {
			out[i] = limitJSON{Type: typ, Limit: limits[typ].String(), LimitSeconds: seconds(limits[typ]), Mode: string(modes[typ])}
		}
		return printJSON(c.stdout, out)
	}
	if len(types) == 0 {
		fmt.Fprintf(c.stdout, "No limits in %s: no job is ever reclaimed. Set one with 'jobguard limits set <type> <duration>'.\n", limitsName(s))
		return nil
	}
	// The MODE column appears when a type is paused or in shadow.
	if len(modes) == 0 {
		t := newTable(c.stdout, "TYPE", "LIMIT")
		for _, typ := range types {
			t.row(typ, limitLine(limits[typ]))
		}
		return t.flush()
	}
	t := newTable(c.stdout, "TYPE", "LIMIT", "MODE")
	for _, typ := range types {
		m, ok := modes[typ]
		if !ok {
			m = reclaim.ModeReclaim
		}
		t.row(typ, limitLine(limits[typ]), modeText(m))
	}
	return t.flush()
}

func limitsSet(ctx context.Context, c *cli, s *settings, args []string) error {
	if len(args) != 2 {
		return usageErr("limits set takes a job type and a duration, such as: limits set chapter 45m")
	}
	typ := args[0]
	limit, err := time.ParseDuration(args[1])
	if err != nil || limit < time.Second {
		return usageErr("limit %q: want %s, and of a second or more", args[1], durationRange)
	}
	cn, tl, before, err := c.openLimits(ctx, s)
	if err != nil {
		return err
	}
	defer cn.close()
	if err := tl.Set(ctx, typ, limit); err != nil {
		return limitsErr(err, s)
	}
	prev, had := before[typ]
	if s.JSON {
		return printJSON(c.stdout, struct {
			Type            string   `json:"type"`
			LimitSeconds    float64  `json:"limit_seconds"`
			PreviousSeconds *float64 `json:"previous_seconds"`
		}{typ, seconds(limit), optSeconds(prev)})
	}
	was := "none"
	if had {
		was = prev.String()
	}
	fmt.Fprintf(c.stdout, "Limit of %q: %s -> %s in %s; the next sweep uses it.\n", typ, was, limit, limitsName(s))
	return nil
}

// suggestionJSON is one suggestion, as --json prints it.
type suggestionJSON struct {
	Type             string   `json:"type"`
	Completed        int      `json:"completed"`
	P50Seconds       float64  `json:"p50_seconds"`
	P90Seconds       float64  `json:"p90_seconds"`
	P99Seconds       float64  `json:"p99_seconds"`
	MaxSeconds       float64  `json:"max_seconds"`
	OverLimit        int      `json:"over_limit"`
	Reclaimed        int      `json:"reclaimed"`
	Failed           int      `json:"failed"`
	LimitSeconds     *float64 `json:"limit_seconds"`
	SuggestedSeconds *float64 `json:"suggested_seconds"`
	Tentative        bool     `json:"tentative"`
	Applied          bool     `json:"applied"`
}

func limitsSuggest(ctx context.Context, c *cli, s *settings, _ []string) error {
	if err := checkSuggest(s.Suggest.Spec); err != nil {
		return err
	}
	cn, err := c.openDB(ctx, s)
	if err != nil {
		return err
	}
	defer cn.close()
	_, cfg, err := cn.reclaimConfig(ctx, s, nil, suggests)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	r, err := reclaim.New(cfg)
	if err != nil {
		return err
	}
	p := c.newProgress(s, "reading the finished jobs")
	sugs, err := r.Suggest(ctx, s.Suggest.Spec)
	p.done()
	if err != nil {
		return limitsErr(err, s)
	}
	applied := make([]bool, len(sugs))
	if s.Suggest.Apply {
		// reclaimConfig's limits are the limits table's.
		if applied, err = applySuggestions(ctx, cfg.Limits.(*reclaim.TableLimits), s, sugs); err != nil {
			return err
		}
	}
	if s.JSON {
		return printJSON(c.stdout, suggestionsJSON(sugs, applied))
	}
	return printSuggestions(c, s, sugs, applied)
}

// checkSuggest refuses the specs Suggest cannot read, naming the flag.
func checkSuggest(sp reclaim.SuggestSpec) error {
	switch {
	case !(sp.Percentile > 0 && sp.Percentile <= 1):
		return usageErr("--percentile %v: want a number above 0 and at most 1, such as 0.99", sp.Percentile)
	case !(sp.Margin >= 1):
		return usageErr("--margin %v: want 1 or more, such as 1.5", sp.Margin)
	case sp.Window <= 0:
		return usageErr("--window %v: want a positive duration, such as 168h", sp.Window)
	case sp.PerType <= 0:
		return usageErr("--per-type %d: want a positive number", sp.PerType)
	case sp.MinCompletions <= 0:
		return usageErr("--min-completions %d: want a positive number", sp.MinCompletions)
	}
	return nil
}

// applySuggestions sets every suggestion that differs from its type's
// limit, and says which it set.
func applySuggestions(ctx context.Context, tl *reclaim.TableLimits, s *settings, sugs []reclaim.Suggestion) ([]bool, error) {
	applied := make([]bool, len(sugs))
	for i, sg := range sugs {
		if sg.Suggested == 0 || sg.Suggested == sg.Limit {
			continue
		}
		if err := tl.Set(ctx, sg.Type, sg.Suggested); err != nil {
			return nil, limitsErr(err, s)
		}
		applied[i] = true
	}
	return applied, nil
}

func suggestionsJSON(sugs []reclaim.Suggestion, applied []bool) []suggestionJSON {
	out := make([]suggestionJSON, len(sugs))
	for i, sg := range sugs {
		out[i] = suggestionJSON{Type: sg.Type, Completed: sg.Completed, P50Seconds: seconds(sg.P50),
			P90Seconds: seconds(sg.P90), P99Seconds: seconds(sg.P99), MaxSeconds: seconds(sg.Max),
			OverLimit: sg.OverLimit, Reclaimed: sg.Reclaimed, Failed: sg.Failed,
			LimitSeconds: optSeconds(sg.Limit), SuggestedSeconds: optSeconds(sg.Suggested), Tentative: sg.Tentative,
			Applied: applied[i]}
	}
	return out
}

// printSuggestions writes a line per type, then the warnings of the
// tentative suggestions, then whether anything was written.
func printSuggestions(c *cli, s *settings, sugs []reclaim.Suggestion, applied []bool) error {
	sp := s.Suggest.Spec
	if len(sugs) == 0 {
		fmt.Fprintf(c.stdout, "No job types: no limit, no active job, and no job finished within %v. Name them with --types.\n", sp.Window)
		return nil
	}
	t := newTable(c.stdout, "TYPE", "COMPLETED", "P50", "P90", "P99", "MAX", "OVER LIMIT", "RECLAIMED", "LIMIT", "SUGGESTED")
	for i, sg := range sugs {
		t.row(sg.Type, fmt.Sprint(sg.Completed), dur(sg.P50), dur(sg.P90), dur(sg.P99), dur(sg.Max),
			fmt.Sprint(sg.OverLimit), fmt.Sprint(sg.Reclaimed), limitText(sg.Limit), suggestedText(sg, applied[i]))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, sg := range sugs {
		if sg.Tentative {
			fmt.Fprintf(c.stdout, "\nWarning: the suggestion for %q rests on %d completions, fewer than %d: "+
				"a first guess, not a tail that was seen; read it before applying it.\n", sg.Type, sg.Completed, sp.MinCompletions)
		}
	}
	if !s.Suggest.Apply {
		fmt.Fprintf(c.stdout, "\nSuggestions only: nothing was written. --apply sets them in %s.\n", limitsName(s))
	}
	return nil
}

// suggestedText prints a suggestion, and whether it is tentative and was
// applied.
func suggestedText(sg reclaim.Suggestion, applied bool) string {
	suggested := dur(sg.Suggested)
	switch {
	case sg.Completed == 0:
		suggested = "- (no completion)"
	case sg.Tentative && applied:
		suggested += " (tentative, applied)"
	case sg.Tentative:
		suggested += " (tentative)"
	case applied:
		suggested += " (applied)"
	}
	return suggested
}

// openLimits connects and reads every limit of the limits table. On
// success the caller closes cn.
func (c *cli) openLimits(ctx context.Context, s *settings) (*conns, *reclaim.TableLimits, map[string]time.Duration, error) {
	cn, err := c.openDB(ctx, s)
	if err != nil {
		return nil, nil, nil, err
	}
	tl, err := cn.limits(s)
	if err == nil {
		var limits map[string]time.Duration
		if limits, err = readLimits(ctx, tl, s); err == nil {
			return cn, tl, limits, nil
		}
	}
	cn.close()
	return nil, nil, nil, err
}

// limitLine prints a limit of the table, and says when it is the longest a
// limit can be: a longer interval in the table ('1000 years', 'infinity')
// reads as that.
func limitLine(d time.Duration) string {
	if d == reclaim.LimitMax {
		return d.String() + " (the longest a limit can be: never reached)"
	}
	return d.String()
}
