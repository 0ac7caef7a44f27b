package settle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// Two meters counted in two tables, billed to one account: one job type
// lists its usage video_ms first, another tokens first. Finalizes settling
// at once take the account's two counter rows in the ledger's one order,
// whatever the record's, and none is aborted as a deadlock: each bills at
// once.
func TestCounters_ConcurrentFinalizesNeverDeadlockOnTheirOwnCounterRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE TABLE ms_totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0);
		CREATE TABLE token_totals (account text PRIMARY KEY, tokens bigint NOT NULL DEFAULT 0);
		INSERT INTO ms_totals (account) VALUES ('acct-1'); INSERT INTO token_totals (account) VALUES ('acct-1')`)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "ms_totals", Key: "account", Column: "ms"},
		"tokens":   {Table: "token_totals", Key: "account", Column: "tokens"}}})
	require.NoError(t, err)
	s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	ctx := context.Background()

	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		exec, spec := b.video(t, 1)
		spec.Updates = nil // a job that only bills
		ms := usage.Entry{Account: "acct-1", Meter: "video_ms", Quantity: 1}
		tokens := usage.Entry{Account: "acct-1", Meter: "tokens", Quantity: 1}
		spec.Usage = []usage.Entry{ms, tokens}
		if i%2 == 1 {
			spec.Usage = []usage.Entry{tokens, ms}
		}
		wg.Go(func() {
			res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
			if err == nil && !res.Settled {
				err = assert.AnError
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	var failed []error
	for err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if !assert.Empty(t, failed, "%d of %d finalizes did not bill at once", len(failed), n) {
		t.Logf("first: %v", failed[0])
	}
	// The sweep (Concurrency 4 records at once) bills the rest, and may
	// deadlock on them the same way; each deadlock is a failed attempt.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		rep, err := s.Sweep(ctx)
		require.NoError(t, err)
		if rep.Taken == 0 {
			break
		}
	}
	var states string
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT string_agg(state || '=' || n, ',' ORDER BY state) FROM
		(SELECT state, count(*) AS n FROM job_settlements GROUP BY state) s`).Scan(&states))
	var ms, tokens int64
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT (SELECT ms FROM ms_totals), (SELECT tokens FROM token_totals)`).Scan(&ms, &tokens))
	assert.Equal(t, []int64{n, n}, []int64{ms, tokens}, "each billed once in the end; records: %s", states)
}
