package usage_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/usage"
)

// A counter table guarded by PostgreSQL's own
// suppress_redundant_updates_trigger (a BEFORE UPDATE trigger that skips an
// update that changes nothing): a quantity of 0 for an account that has its
// row already changes nothing, and its ledger row is new all the same:
// accrued, and its increment run once (Entry.Quantity: "Zero is a quantity
// like any other").
func TestCounters_CounterZeroQuantityIsAccruedEvenWhenTheTotalDoesNotChange(t *testing.T) {
	t.Parallel()
	for _, withIncrement := range []bool{false, true} {
		t.Run(fmt.Sprintf("increment=%v", withIncrement), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.env.Exec(`CREATE TABLE totals (account text PRIMARY KEY, seconds bigint NOT NULL DEFAULT 0);
				CREATE TRIGGER totals_unchanged BEFORE UPDATE ON totals FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
				INSERT INTO totals VALUES ('acct-1', 100)`)
			l, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
				"video_seconds": {Table: "totals", Key: "account", Column: "seconds"}}})
			require.NoError(t, err)
			ctx := context.Background()
			fin, err := b.finalize(t, "PROCESSING")
			require.NoError(t, err)
			var inc func(context.Context, pgx.Tx) error
			if withIncrement {
				inc = b.increment(0)
			}
			acc, err := l.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: 0}, inc)
			require.NoError(t, err)
			assert.True(t, acc.Accrued, "a new ledger row is this call's accrual")
			assert.Equal(t, 1, b.ledgerRows(t), "the job's zero usage is recorded")
			if withIncrement {
				assert.Equal(t, int64(1), b.increments.Load(), "its increment runs once")
			}
		})
	}
}
