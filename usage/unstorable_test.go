package usage_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

// An entry whose account, meter or attributes PostgreSQL cannot store
// (U+0000, bytes that are not UTF-8, half a surrogate pair, a number
// beyond numeric's range) is refused by Accrue and AccrueTx before
// anything is sent, with a permanent error naming the field: no ledger
// row, no increment, and a caller's transaction still usable.
func TestAccrue_RefusesAnEntryPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ledger, err := usage.NewLedger(usage.Config{})
	require.NoError(t, err)
	ok := usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: 1}
	with := func(edit func(*usage.Entry)) usage.Entry { e := ok; edit(&e); return e }
	cases := map[string]struct {
		entry usage.Entry
		field string
	}{
		"account NUL":                {with(func(e *usage.Entry) { e.Account = "a\x00" }), "Account"},
		"account not UTF-8":          {with(func(e *usage.Entry) { e.Account = "a\xff" }), "Account"},
		"meter NUL":                  {with(func(e *usage.Entry) { e.Meter = "\x00" }), "Meter"},
		"meter not UTF-8":            {with(func(e *usage.Entry) { e.Meter = "m\xc3" }), "Meter"},
		"attributes NUL value":       {with(func(e *usage.Entry) { e.Attributes = map[string]any{"a": "x\x00y"} }), "Attributes"},
		"attributes NUL key":         {with(func(e *usage.Entry) { e.Attributes = map[string]any{"\x00": 1} }), "Attributes"},
		"attributes NUL nested":      {with(func(e *usage.Entry) { e.Attributes = map[string]any{"a": []any{map[string]string{"b": "\x00"}}} }), "Attributes"},
		"attributes raw \\u0000":     {with(func(e *usage.Entry) { e.Attributes = map[string]any{"a": json.RawMessage(`"\u0000"`)} }), "Attributes"},
		"attributes raw surrogate":   {with(func(e *usage.Entry) { e.Attributes = map[string]any{"a": json.RawMessage(`"\ude00"`)} }), "Attributes"},
		"attributes number too big":  {with(func(e *usage.Entry) { e.Attributes = map[string]any{"n": json.Number("1e131072")} }), "Attributes"},
		"attributes raw not UTF-8":   {with(func(e *usage.Entry) { e.Attributes = map[string]any{"a": json.RawMessage("\"\xff\"")} }), "Attributes"},
		"attributes number too fine": {with(func(e *usage.Entry) { e.Attributes = map[string]any{"n": json.Number("1e-16384")} }), "Attributes"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			fin, err := b.finalize(t, "PROCESSING")
			require.NoError(t, err)
			ran := false
			inc := func(context.Context, pgx.Tx) error { ran = true; return nil }
			check := func(err error) {
				t.Helper()
				require.ErrorIs(t, err, jobguard.ErrUnstorable)
				require.True(t, jobguard.IsPermanent(err))
				require.ErrorContains(t, err, "usage: accrue: "+c.field+": ")
				require.False(t, ran, "the increment ran")
			}
			_, err = usage.Accrue(ctx, b.env.Pool, fin, c.entry, inc)
			check(err)

			tx, err := b.env.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = ledger.AccrueTx(ctx, tx, fin, c.entry, inc)
			check(err)
			require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(new(int)), "the caller's transaction is broken")
			var rows int
			require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM usage_ledger WHERE job_id = $1`,
				fin.Execution().JobID).Scan(&rows))
			require.Zero(t, rows)
		})
	}
}
