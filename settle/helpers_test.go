package settle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// productSchema is what the handlers and the increment write: a video's
// status and duration, its published content, and an account's billed
// milliseconds. handler_runs counts every run of a handler that did its
// work, in any process.
const productSchema = `
CREATE TABLE videos (
    id          text PRIMARY KEY,
    status      text NOT NULL DEFAULT 'ENCODING',
    duration_ms bigint
);
CREATE TABLE contents (
    video_id  text PRIMARY KEY,
    published boolean NOT NULL DEFAULT false
);
CREATE TABLE accounts (
    id       text PRIMARY KEY,
    video_ms bigint NOT NULL DEFAULT 0
);
CREATE TABLE handler_runs (
    job_id text NOT NULL,
    name   text NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO accounts (id) VALUES ('acct-1');
`

// videoArgs are the arguments of both updates.
type videoArgs struct {
	VideoID    string `json:"video_id"`
	DurationMS int64  `json:"duration_ms"`
}

// faults makes handlers fail: name → failures still to return, in this
// process. A negative count fails for ever.
type faults struct {
	mu   sync.Mutex
	left map[string]int
}

func (f *faults) set(name string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.left == nil {
		f.left = map[string]int{}
	}
	f.left[name] = n
}

func (f *faults) take(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch n := f.left[name]; {
	case n < 0:
		return fmt.Errorf("%s store refuses the write", name)
	case n > 0:
		f.left[name] = n - 1
		return fmt.Errorf("%s store unavailable", name)
	}
	return nil
}

// hooks let a test run code inside a handler or the increment, in this
// process: at a handler's entry, after its work, and inside the billing
// transaction.
type hooks struct {
	enter, worked func(name string)
	billing       func()
}

// handlers are the idempotent metadata updates: "video" sets the video
// READY with its duration, "content" publishes its content. Each records
// its run in handler_runs, in the same statement as its work.
func handlers(db *pgxpool.Pool, f *faults, h *hooks) map[string]settle.Handler {
	run := func(name, sql string) settle.Handler {
		return func(ctx context.Context, exec jobguard.Execution, raw json.RawMessage) error {
			if h != nil && h.enter != nil {
				h.enter(name)
			}
			if err := f.take(name); err != nil {
				return err
			}
			var a videoArgs
			if err := json.Unmarshal(raw, &a); err != nil {
				return err
			}
			tag, err := db.Exec(ctx, `WITH w AS (`+sql+` RETURNING 1)
				INSERT INTO handler_runs (job_id, name) SELECT $3, $4 FROM w`, a.VideoID, a.DurationMS, exec.JobID, name)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("%s of video %s: %d rows", name, a.VideoID, tag.RowsAffected())
			}
			if err == nil && h != nil && h.worked != nil {
				h.worked(name)
			}
			return err
		}
	}
	return map[string]settle.Handler{
		"video": run("video", `UPDATE videos SET status = 'READY', duration_ms = $2 WHERE id = $1`),
		"content": run("content", `INSERT INTO contents (video_id, published) SELECT $1, $2 > 0
			ON CONFLICT (video_id) DO UPDATE SET published = true`),
	}
}

// increments bill video_ms to the entry's account.
func increments(h *hooks) map[string]settle.Increment {
	return map[string]settle.Increment{
		"video_ms": func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
			tag, err := tx.Exec(ctx, `UPDATE accounts SET video_ms = video_ms + $2 WHERE id = $1`, e.Account, e.Quantity)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("account %s: %d rows", e.Account, tag.RowsAffected())
			}
			if err == nil && h != nil && h.billing != nil {
				h.billing()
			}
			return err
		},
	}
}

type bundle struct {
	env    *testenv.Env
	jobs   *fixture.Jobs
	faults *faults
	hooks  *hooks
	logs   *testenv.Logs
	s      *settle.Settler
}

// quick is the configuration of a test: no grace, short backoffs, so that
// a record left pending is due at once and retried within milliseconds.
func quick(cfg settle.Config) settle.Config {
	cfg.Grace = time.Microsecond
	cfg.BackoffMin = time.Millisecond
	cfg.BackoffMax = 4 * time.Millisecond
	cfg.UpdateTimeout = 5 * time.Second
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	return cfg
}

func setup(t testing.TB, opts ...testenv.Config) *bundle {
	t.Helper()
	env := testenv.New(t, opts...)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(usage.Migration)
	env.Exec(settle.Migration)
	env.Exec(productSchema)
	b := &bundle{env: env, jobs: jobs, faults: &faults{}, hooks: &hooks{}, logs: &testenv.Logs{}}
	b.s = b.settler(t, quick(settle.Config{}))
	return b
}

// settler builds another Settler over the bundle's tables: another
// process's view. Guard, DB, Handlers, Increments and Logger default to the
// bundle's.
func (b *bundle) settler(t testing.TB, cfg settle.Config) *settle.Settler {
	t.Helper()
	if cfg.Guard == nil {
		cfg.Guard = b.jobs.Guard
	}
	if cfg.DB == nil {
		cfg.DB = b.env.Pool
	}
	if cfg.Handlers == nil {
		cfg.Handlers = handlers(cfg.DB, b.faults, b.hooks)
	}
	if cfg.Increments == nil {
		cfg.Increments = increments(b.hooks)
	}
	if cfg.Logger == nil {
		cfg.Logger = b.logs.Logger()
	}
	s, err := settle.New(context.Background(), cfg)
	require.NoError(t, err)
	return s
}

// video inserts a PROCESSING job at generation 1 with its video, and
// returns the execution and the spec that finalizes it.
func (b *bundle) video(t testing.TB, durationMS int64) (jobguard.Execution, settle.Spec) {
	t.Helper()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1, Type: "video"})
	vid := "video-" + id[:8]
	b.env.Exec(`INSERT INTO videos (id) VALUES ($1)`, vid)
	args := videoArgs{VideoID: vid, DurationMS: durationMS}
	return jobguard.Execution{JobID: id, Generation: 1}, settle.Spec{
		Updates: []settle.Update{{Name: "video", Args: args}, {Name: "content", Args: args}},
		Usage:   []usage.Entry{{Account: "acct-1", Meter: "video_ms", Quantity: durationMS}},
	}
}

// state is a record as the table holds it.
type state struct {
	State    string
	Pending  []string
	Attempts int
	Error    string
}

func (b *bundle) record(t testing.TB, exec jobguard.Execution) (state, bool) {
	t.Helper()
	var s state
	var lastErr *string
	err := b.env.Pool.QueryRow(context.Background(), `SELECT state, pending, attempts, last_error FROM job_settlements
		WHERE job_id = $1 AND generation = $2`, exec.JobID, exec.Generation).Scan(&s.State, &s.Pending, &s.Attempts, &lastErr)
	if errors.Is(err, pgx.ErrNoRows) {
		return state{}, false
	}
	require.NoError(t, err)
	if lastErr != nil {
		s.Error = *lastErr
	}
	return s, true
}

// billed is what the database says was billed for exec: its ledger rows,
// the account's total, and whether its metadata caught up.
type billed struct {
	LedgerRows int
	AccountMS  int64
	VideoReady bool
	Published  bool
}

func (b *bundle) billed(t testing.TB, exec jobguard.Execution) billed {
	t.Helper()
	var out billed
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM usage_ledger WHERE job_id = $1),
		(SELECT video_ms FROM accounts WHERE id = 'acct-1'),
		(SELECT coalesce(bool_and(status = 'READY'), false) FROM videos WHERE id = $2),
		(SELECT coalesce(bool_and(published), false) FROM contents WHERE video_id = $2)`,
		exec.JobID, "video-"+exec.JobID[:8]).Scan(&out.LedgerRows, &out.AccountMS, &out.VideoReady, &out.Published))
	return out
}

// runs counts the handler runs that did their work, by name, for exec.
func (b *bundle) runs(t testing.TB, exec jobguard.Execution) map[string]int {
	t.Helper()
	rows, err := b.env.Pool.Query(context.Background(), `SELECT name, count(*) FROM handler_runs WHERE job_id = $1 GROUP BY name`, exec.JobID)
	require.NoError(t, err)
	out := map[string]int{}
	var name string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { out[name] = n; return nil })
	require.NoError(t, err)
	return out
}

// settleAll sweeps until nothing is pending, or fails after five seconds.
func (b *bundle) settleAll(t testing.TB, s *settle.Settler) settle.Report {
	t.Helper()
	var total settle.Report
	deadline := time.Now().Add(5 * time.Second)
	for {
		rep, err := s.Sweep(context.Background())
		require.NoError(t, err)
		total.Taken += rep.Taken
		total.Settled += rep.Settled
		total.Raced += rep.Raced
		total.Retrying += rep.Retrying
		total.GivenUp += rep.GivenUp
		total.Unregistered += rep.Unregistered
		total.Updates += rep.Updates
		total.Accrued += rep.Accrued
		var pending int
		require.NoError(t, b.env.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM job_settlements WHERE state = 'pending'`).Scan(&pending))
		if pending == 0 {
			return total
		}
		require.True(t, time.Now().Before(deadline), "%d records still pending", pending)
		time.Sleep(2 * time.Millisecond)
	}
}

// discard is a logger that writes nothing.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
