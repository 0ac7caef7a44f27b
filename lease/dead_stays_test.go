package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
)

// A lease Dead answers dead stays dead: a renewal under way as the lease
// expires (it passed its check before the expiry and has not committed)
// does not revive it once it commits after Dead's answer.
func TestDead_ALeaseFoundDeadStaysDeadWhenARenewalUnderWayCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := setup(t)
	id := "w-renewal-under-way"
	env.Exec(`INSERT INTO ` + lease.WorkersTableDefault + ` (id, host, pid, started_at, renewed_at, expires_at)
		VALUES ('` + id + `', '', 0, now(), now(), now() + interval '500 milliseconds')`)

	// The renewal has written its row before the expiry, and not committed.
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	l, err := lease.New(tx, lease.Config{ID: id, TTL: time.Hour})
	require.NoError(t, err)
	renewed, err := l.RenewOnce(ctx)
	require.NoError(t, err)
	require.True(t, renewed, "the lease is live as the renewal writes it")
	require.Eventually(t, func() bool {
		var past bool
		err := env.Pool.QueryRow(ctx, `SELECT now() > expires_at FROM `+lease.WorkersTableDefault+` WHERE id = $1`, id).Scan(&past)
		return err == nil && past
	}, testenv.Patience, 20*time.Millisecond, "the committed lease expires")

	w := lease.Workers{}
	dead, err := w.Dead(ctx, env.Pool, []string{id})
	require.NoError(t, err)
	foundDead := len(dead) == 1
	require.NoError(t, tx.Commit(ctx))
	dead, err = w.Dead(ctx, env.Pool, []string{id})
	require.NoError(t, err)
	if foundDead {
		require.Equal(t, []string{id}, dead, "a lease found dead stays dead")
	}
}
