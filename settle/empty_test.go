package settle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// echo is a handler that keeps the arguments it was given, by job, and an
// increment that bills "units" to the entry's own account.
type echo struct {
	mu   sync.Mutex
	args map[string][]string // job id → the arguments of every run
}

func (e *echo) handler(_ context.Context, exec jobguard.Execution, args json.RawMessage) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.args == nil {
		e.args = map[string][]string{}
	}
	e.args[exec.JobID] = append(e.args[exec.JobID], string(args))
	return nil
}

func (e *echo) runs(jobID string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.args[jobID]
}

func bill(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
	tag, err := tx.Exec(ctx, `UPDATE accounts SET video_ms = video_ms + $2 WHERE id = $1`, e.Account, e.Quantity)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("account %s: %d rows", e.Account, tag.RowsAffected())
	}
	return err
}

// Every empty and zero input of a Spec completes its job and settles its
// record, whether in the finalize's own process or, after that process
// lost the database right after the completion committed, through the
// sweep: no updates (a job that only bills), no usage, no arguments in
// every spelling of none, nothing at all, and quantities of zero and of
// the largest int64.
func TestFinalize_EmptyAndZeroInputsCompleteAndSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	e := &echo{}
	cfg := quick(settle.Config{
		Handlers:   map[string]settle.Handler{"echo": e.handler},
		Increments: map[string]settle.Increment{"units": bill},
	})
	live := b.settler(t, cfg)
	// The crashed process: its completion commits on the pool it is given,
	// and everything after (marks, billing, the record of the failure) is
	// lost with its database connection.
	lost := b.env.Connect(testenv.Config{MaxConns: 2})
	crashedCfg := cfg
	crashedCfg.DB = lost
	crashed := b.settler(t, crashedCfg)
	lost.Close()

	echoed := func(args any) []settle.Update { return []settle.Update{{Name: "echo", Args: args}} }
	cases := []struct {
		name     string
		spec     func(account string) settle.Spec
		wantArgs string // the arguments the handler gets; "" when the spec has no update
		wantQty  int64  // billed to the account, when the spec bills
		bills    bool
	}{
		{name: "a wholly empty spec", spec: func(string) settle.Spec { return settle.Spec{} }},
		{name: "no updates, nil: a job that only bills", bills: true, wantQty: 1500, spec: func(a string) settle.Spec {
			return settle.Spec{Usage: []usage.Entry{{Account: a, Meter: "units", Quantity: 1500}}}
		}},
		{name: "no updates, empty", bills: true, wantQty: 1500, spec: func(a string) settle.Spec {
			return settle.Spec{Updates: []settle.Update{}, Usage: []usage.Entry{{Account: a, Meter: "units", Quantity: 1500}}}
		}},
		{name: "no usage, nil", wantArgs: `{"x":1}`, spec: func(string) settle.Spec {
			return settle.Spec{Updates: echoed(map[string]int{"x": 1})}
		}},
		{name: "no usage, empty", wantArgs: `{"x":1}`, spec: func(string) settle.Spec {
			return settle.Spec{Updates: echoed(map[string]int{"x": 1}), Usage: []usage.Entry{}}
		}},
		{name: "args nil", wantArgs: `null`, spec: func(string) settle.Spec { return settle.Spec{Updates: echoed(nil)} }},
		{name: "args a nil RawMessage", wantArgs: `null`, spec: func(string) settle.Spec {
			return settle.Spec{Updates: echoed(json.RawMessage(nil))}
		}},
		{name: "args an empty RawMessage", wantArgs: `null`, spec: func(string) settle.Spec {
			return settle.Spec{Updates: echoed(json.RawMessage{})}
		}},
		{name: "args a nil slice", wantArgs: `null`, spec: func(string) settle.Spec { return settle.Spec{Updates: echoed([]string(nil))} }},
		{name: "args an empty slice", wantArgs: `[]`, spec: func(string) settle.Spec { return settle.Spec{Updates: echoed([]string{})} }},
		{name: "args an empty map", wantArgs: `{}`, spec: func(string) settle.Spec { return settle.Spec{Updates: echoed(map[string]any{})} }},
		{name: "args an empty struct", wantArgs: `{}`, spec: func(string) settle.Spec { return settle.Spec{Updates: echoed(struct{}{})} }},
		{name: "args an empty string", wantArgs: `""`, spec: func(string) settle.Spec { return settle.Spec{Updates: echoed("")} }},
		{name: "args zero", wantArgs: `0`, spec: func(string) settle.Spec { return settle.Spec{Updates: echoed(0)} }},
		{name: "quantity zero", bills: true, wantQty: 0, spec: func(a string) settle.Spec {
			return settle.Spec{Usage: []usage.Entry{{Account: a, Meter: "units"}}}
		}},
		{name: "quantity the largest int64", bills: true, wantQty: math.MaxInt64, spec: func(a string) settle.Spec {
			return settle.Spec{Usage: []usage.Entry{{Account: a, Meter: "units", Quantity: math.MaxInt64}}}
		}},
		{name: "empty attributes", bills: true, wantQty: 7, spec: func(a string) settle.Spec {
			return settle.Spec{Usage: []usage.Entry{{Account: a, Meter: "units", Quantity: 7, Attributes: map[string]any{}}}}
		}},
	}
	for _, tc := range cases {
		for _, path := range []string{"in process", "after a crash, by the sweep"} {
			t.Run(tc.name+"/"+path, func(t *testing.T) {
				id := b.jobs.Insert(t, fixture.Job{Generation: 1})
				exec := jobguard.Execution{JobID: id, Generation: 1}
				account := "acct-" + id
				b.env.Exec(`INSERT INTO accounts (id) VALUES ($1)`, account)
				spec := tc.spec(account)

				if path == "in process" {
					res, err := live.Finalize(ctx, b.env.Pool, exec, spec)
					require.NoError(t, err)
					require.True(t, res.Finalized.Confirmed())
					require.True(t, res.Settled)
				} else {
					res, err := crashed.Finalize(ctx, b.env.Pool, exec, spec)
					require.ErrorIs(t, err, settle.ErrPending)
					require.True(t, res.Finalized.Completed(), "the completion committed: %v", err)
					rec, ok := b.record(t, exec)
					require.True(t, ok, "the completion wrote no record")
					require.Equal(t, "pending", rec.State)
					rep, err := live.Sweep(ctx)
					require.NoError(t, err)
					require.Equal(t, 1, rep.Settled, "%+v", rep)
				}

				require.Equal(t, "COMPLETED", b.jobs.Read(t, id).Status)
				rec, ok := b.record(t, exec)
				require.True(t, ok)
				require.Equal(t, "confirmed", rec.State)
				require.Empty(t, rec.Pending)
				if tc.wantArgs == "" {
					require.Empty(t, e.runs(id), "no update was named")
				} else {
					runs := e.runs(id)
					require.NotEmpty(t, runs)
					for _, got := range runs {
						require.JSONEq(t, tc.wantArgs, got, "the handler's arguments")
					}
				}
				var rows int
				var qty, total int64
				var attrs *string
				require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(l.quantity), 0)::int8,
					(SELECT video_ms FROM accounts WHERE id = $2), max(l.attributes::text)
					FROM usage_ledger l WHERE l.job_id = $1`, id, account).Scan(&rows, &qty, &total, &attrs))
				if !tc.bills {
					require.Zero(t, rows, "nothing was to be billed")
					return
				}
				require.Equal(t, 1, rows, "one ledger row")
				require.Equal(t, tc.wantQty, qty)
				require.Equal(t, tc.wantQty, total, "the increment ran once")
				require.Nil(t, attrs, "no attributes, however spelled, are stored as none")
			})
		}
	}
}

// A quantity below zero, an entry without its account or meter, and an
// id that names no job are refused before anything is written.
func TestFinalize_NegativeQuantityAndEmptyNamesAreRefusedBeforeAnythingIsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for want, edit := range map[string]func(*settle.Spec, *jobguard.Execution){
		"Quantity -1 is negative":                   func(s *settle.Spec, _ *jobguard.Execution) { s.Usage[0].Quantity = -1 },
		"Quantity -9223372036854775808 is negative": func(s *settle.Spec, _ *jobguard.Execution) { s.Usage[0].Quantity = math.MinInt64 },
		"Usage[0]: Account is empty":                func(s *settle.Spec, _ *jobguard.Execution) { s.Usage[0].Account = "" },
		"Usage[0]: Meter is empty":                  func(s *settle.Spec, _ *jobguard.Execution) { s.Usage[0].Meter = "" },
		"Updates[0]: Name is empty":                 func(s *settle.Spec, _ *jobguard.Execution) { s.Updates[0].Name = "" },
		"job id is empty":                           func(_ *settle.Spec, e *jobguard.Execution) { e.JobID = "" },
	} {
		exec, spec := b.video(t, 1000)
		id := exec.JobID
		edit(&spec, &exec)
		res, err := b.s.Finalize(ctx, b.env.Pool, exec, spec)
		require.ErrorContains(t, err, want)
		require.False(t, res.Finalized.Completed(), want)
		require.Equal(t, "PROCESSING", b.jobs.Read(t, id).Status, want)
		_, ok := b.record(t, jobguard.Execution{JobID: id, Generation: 1})
		require.False(t, ok, want)
	}
}

// A sweep with nothing to do, and a Reopen of nothing, are quiet.
func TestSweep_EmptyTableIsANoOp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, err := b.s.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, settle.Report{}, rep)
	require.ErrorIs(t, b.s.Reopen(context.Background(), jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{})}), settle.ErrNotGivenUp)
	require.Contains(t, b.logs.String(), `level=INFO msg="settle: sweep" taken=0`)
}
