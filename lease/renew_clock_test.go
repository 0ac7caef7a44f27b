package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
)

// A renewal judges the lease on the clock as it writes the row, not as
// its statement or transaction began: one that began before the expiry
// and reaches the row after it (it waited for a rescue's lock, or for the
// server) is refused, so that a lease a rescue found expired stays so.
func TestRenew_ReachingTheRowAfterTheExpiryIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	id := "w-late-renewal"
	env.Exec(`INSERT INTO ` + lease.WorkersTableDefault + ` (id, host, pid, started_at, renewed_at, expires_at)
		VALUES ('` + id + `', '', 0, now(), now(), now() + interval '300 milliseconds')`)

	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT now()`) // the transaction's clock starts before the expiry
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var past bool
		err := env.Pool.QueryRow(ctx, `SELECT clock_timestamp() > expires_at FROM `+lease.WorkersTableDefault+` WHERE id = $1`, id).Scan(&past)
		return err == nil && past
	}, testenv.Patience, 20*time.Millisecond, "the lease expires")

	l, err := lease.New(tx, lease.Config{ID: id})
	require.NoError(t, err)
	renewed, err := l.RenewOnce(ctx)
	require.NoError(t, err)
	require.False(t, renewed, "a lease that expired stays expired")
}
