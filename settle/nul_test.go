package settle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// A string holding U+0000 is a Go string like any other, and encoding/json
// writes it as valid JSON ("\u0000"), but jsonb cannot store it; nor half
// a surrogate pair in a json.RawMessage, nor a number beyond numeric's
// range, nor bytes that are not UTF-8; nor can text store U+0000 or such
// bytes in an account. The record is written in the completion's
// transaction, so such a spec would roll the completion back on every
// try. Finalize refuses it before anything runs, with a permanent error
// that names the field: Recheck is not called, the job is as it was, no
// record, no handler run, nothing billed.
func TestFinalize_RefusesArgumentsAndAttributesPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	e := &echo{}
	s := b.settler(t, quick(settle.Config{
		Handlers:   map[string]settle.Handler{"echo": e.handler, "other": e.handler},
		Increments: map[string]settle.Increment{"units": bill, "video_ms": bill},
	}))
	args := func(a any) settle.Spec {
		return settle.Spec{Updates: []settle.Update{{Name: "other", Args: 1}, {Name: "echo", Args: a}}}
	}
	attrs := func(a map[string]any) settle.Spec {
		return settle.Spec{Updates: []settle.Update{{Name: "echo"}}, Usage: []usage.Entry{
			{Account: "acct-1", Meter: "video_ms", Quantity: 1},
			{Account: "acct-1", Meter: "units", Quantity: 1, Attributes: a}}}
	}
	account := func(acct string) settle.Spec {
		return settle.Spec{Usage: []usage.Entry{{Account: acct, Meter: "units", Quantity: 1}}}
	}
	const argsField, attrsField, acctField = "Updates[1] (echo): Args", "Usage[1]: Attributes", "Usage[0]: Account"
	for name, c := range map[string]struct {
		spec  settle.Spec
		field string
	}{
		"args: NUL in a value":              {args(map[string]string{"caption": "take\x00two"}), argsField},
		"args: NUL alone":                   {args("\x00"), argsField},
		"args: NUL in a key":                {args(map[string]int{"k\x00": 1}), argsField},
		"args: NUL nested":                  {args(map[string]any{"a": []any{1, map[string]string{"b": "\x00"}}}), argsField},
		"args: raw \\u0000":                 {args(json.RawMessage(`{"a":"\u0000"}`)), argsField},
		"args: raw high surrogate alone":    {args(json.RawMessage(`["\ud83d"]`)), argsField},
		"args: raw low surrogate alone":     {args(json.RawMessage(`"x\ude00"`)), argsField},
		"args: raw number too large":        {args(json.RawMessage(`{"n":1e131072}`)), argsField},
		"args: raw number too small":        {args(json.RawMessage(`{"n":1e-16384}`)), argsField},
		"args: raw bytes not UTF-8":         {args(json.RawMessage("{\"a\":\"\xff\"}")), argsField},
		"args: a number beyond numeric":     {args(map[string]any{"n": json.Number("-9e999999")}), argsField},
		"attributes: NUL in a value":        {attrs(map[string]any{"caption": "take\x00two"}), attrsField},
		"attributes: NUL in a key":          {attrs(map[string]any{"\x00": "x"}), attrsField},
		"attributes: NUL nested":            {attrs(map[string]any{"a": map[string]any{"b": []string{"\x00"}}}), attrsField},
		"attributes: raw surrogate alone":   {attrs(map[string]any{"a": json.RawMessage(`"\udbff"`)}), attrsField},
		"attributes: a number beyond range": {attrs(map[string]any{"n": json.Number("1e1073741823")}), attrsField},
		"attributes: raw bytes not UTF-8":   {attrs(map[string]any{"a": json.RawMessage("\"\xc3\"")}), attrsField},
		"account: NUL":                      {account("acct\x001"), acctField},
		"account: bytes not UTF-8":          {account("acct\xff"), acctField},
	} {
		t.Run(name, func(t *testing.T) {
			exec, _ := b.video(t, 1)
			before := b.jobs.Read(t, exec.JobID)
			rechecked := false
			c.spec.Recheck = func(context.Context) error { rechecked = true; return nil }
			res, err := s.Finalize(ctx, b.env.Pool, exec, c.spec)
			require.ErrorIs(t, err, jobguard.ErrUnstorable)
			require.True(t, jobguard.IsPermanent(err), "a spec that can never be stored must not be retried")
			require.ErrorContains(t, err, c.field)
			require.False(t, res.Finalized.Completed())
			require.False(t, rechecked, "Recheck ran for a refused spec")
			require.Equal(t, before, b.jobs.Read(t, exec.JobID), "the job changed")
			_, found := b.record(t, exec)
			require.False(t, found, "a record was written")
			require.Empty(t, e.runs(exec.JobID), "a handler ran")
			require.Zero(t, b.billed(t, exec).LedgerRows)
		})
	}
}

// Their valid neighbours are stored and handed over as any other
// arguments and attributes: an escaped backslash before "u0000", U+0001,
// a whole surrogate pair, U+FFFD, numbers at numeric's bounds.
func TestFinalize_ArgumentsAndAttributesNextToTheLimitsCompleteAndSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	e := &echo{}
	s := b.settler(t, quick(settle.Config{
		Handlers: map[string]settle.Handler{"echo": e.handler},
		Increments: map[string]settle.Increment{
			"units": func(context.Context, pgx.Tx, jobguard.Execution, usage.Entry) error { return nil },
		},
	}))
	for i, v := range []any{
		`\u0000`, "\x01", "\uFFFD", "😀", json.RawMessage(`"\ud83d\ude00"`), json.RawMessage(`1e131071`),
		json.RawMessage(`1e-16383`), json.RawMessage(`0e999999`), map[string]string{`\`: `\u0000`},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			exec, _ := b.video(t, 1)
			res, err := s.Finalize(ctx, b.env.Pool, exec, settle.Spec{
				Updates: []settle.Update{{Name: "echo", Args: v}},
				Usage:   []usage.Entry{{Account: "acct-1\u00e9", Meter: "units", Attributes: map[string]any{"v": v}}},
			})
			require.NoError(t, err)
			require.True(t, res.Settled)
			runs := e.runs(exec.JobID)
			require.Len(t, runs, 1)
			want, err := json.Marshal(v)
			require.NoError(t, err)
			var same bool
			require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT $1::jsonb = $2::jsonb`, runs[0], string(want)).Scan(&same))
			require.True(t, same, "the handler got %s for %s", runs[0], want)
		})
	}
}

// A handler whose error holds U+0000 or bytes that are not UTF-8 fails its
// attempt like any other: the record keeps the error (as text can hold
// it), is retried after its backoff and given up visibly after
// MaxAttempts. The error could not be written as it was, so the verdict
// failed and the record was only taken again once its lease ran out.
func TestSweep_HandlerErrorThatTextCannotHoldIsRecordedAndGivenUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := b.settler(t, quick(settle.Config{
		MaxAttempts: 2,
		Handlers: map[string]settle.Handler{"echo": func(context.Context, jobguard.Execution, json.RawMessage) error {
			return errors.New("store says no\x00 at \xff")
		}},
		Increments: map[string]settle.Increment{"units": func(context.Context, pgx.Tx, jobguard.Execution, usage.Entry) error { return nil }},
	}))
	exec, _ := b.video(t, 1)
	_, err := s.Finalize(ctx, b.env.Pool, exec, settle.Spec{Updates: []settle.Update{{Name: "echo"}}})
	require.ErrorIs(t, err, settle.ErrPending)
	require.NotContains(t, err.Error(), "record the failure")
	rec, _ := b.record(t, exec)
	require.Contains(t, rec.Error, "update echo: store says no\\x00 at \uFFFD")

	rep := b.settleAll(t, s)
	require.Equal(t, 2, rep.Taken, "%+v", rep)
	require.Equal(t, 1, rep.GivenUp, "%+v", rep)
	rec, _ = b.record(t, exec)
	require.Equal(t, "given_up", rec.State)
	require.Equal(t, 2, rec.Attempts)
	require.Contains(t, rec.Error, "store says no\\x00 at \uFFFD")
}
