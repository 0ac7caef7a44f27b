package lease_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
)

func TestNew_RefusesABadConfigNamingTheField(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	for _, tc := range []struct {
		cfg   lease.Config
		field string
	}{
		{lease.Config{TTL: -time.Second}, "TTL"},
		{lease.Config{TTL: time.Microsecond}, "TTL"},
		{lease.Config{Renew: -time.Second}, "Renew"},
		{lease.Config{TTL: time.Second, Renew: time.Second}, "Renew"},
		{lease.Config{TTL: time.Second, Renew: 2 * time.Second}, "Renew"},
		{lease.Config{Timeout: -time.Second}, "Timeout"},
		{lease.Config{TTL: time.Second, Timeout: time.Second}, "Timeout"},
		{lease.Config{ID: "a\x00b"}, "ID"},
		{lease.Config{Workers: lease.Workers{Table: strings.Repeat("w", 64)}}, "Table"},
		{lease.Config{Workers: lease.Workers{Schema: "a\x00b"}}, "Schema"},
	} {
		_, err := lease.New(env.Pool, tc.cfg)
		require.ErrorContains(t, err, tc.field, "%+v", tc.cfg)
	}
	_, err := lease.New(nil, lease.Config{})
	require.ErrorContains(t, err, "DB")
}

func TestNew_Defaults(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	a, err := lease.New(env.Pool, lease.Config{})
	require.NoError(t, err)
	b, err := lease.New(env.Pool, lease.Config{})
	require.NoError(t, err)
	require.Equal(t, lease.TTLDefault, a.TTL())
	require.NotEmpty(t, a.ID())
	require.NotEqual(t, a.ID(), b.ID(), "every lease a new id")
}

func TestLease_AcquireRenewRelease(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ctx := context.Background()
	// A TTL that a loaded machine's renewals meet, renewed often.
	const ttl = time.Minute
	l, err := lease.New(env.Pool, lease.Config{TTL: ttl, Renew: 100 * time.Millisecond, Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.True(t, dead(t, env.Pool, l.ID()), "not live before Start")

	require.NoError(t, l.Start(ctx))
	require.NoError(t, l.Start(ctx), "a second Start does nothing")
	r, ok := readRow(t, env.Pool, l.ID())
	require.True(t, ok)
	host, _ := os.Hostname()
	require.Equal(t, host, r.Host)
	require.Equal(t, os.Getpid(), r.PID)
	require.Greater(t, r.Left, time.Duration(0))
	require.LessOrEqual(t, r.Left, ttl, "expires TTL after the database's now()")
	require.False(t, dead(t, env.Pool, l.ID()))

	waitRenewed(t, env.Pool, l.ID())
	renewed, _ := readRow(t, env.Pool, l.ID())
	require.True(t, renewed.Expires.After(r.Expires), "a renewal moved the expiry on")
	require.LessOrEqual(t, renewed.Left, ttl)
	require.NoError(t, l.Err())
	select {
	case <-l.Lost():
		t.Fatal("Lost closed while the lease is held")
	default:
	}

	require.NoError(t, l.Stop(ctx))
	require.NoError(t, l.Stop(ctx), "a second Stop does nothing")
	<-l.Lost()
	require.ErrorIs(t, l.Err(), lease.ErrReleased)
	require.True(t, dead(t, env.Pool, l.ID()), "released: dead at once, not TTL later")
	after, ok := readRow(t, env.Pool, l.ID())
	require.True(t, ok, "the row stays, so that the id is never taken again")
	require.LessOrEqual(t, after.Left, time.Duration(0))
	require.ErrorIs(t, l.Start(ctx), lease.ErrStopped)
}

func TestLease_StopBeforeStart(t *testing.T) {
	t.Parallel()
	env := setup(t)
	l, err := lease.New(env.Pool, lease.Config{})
	require.NoError(t, err)
	require.NoError(t, l.Stop(context.Background()))
	<-l.Lost()
	require.ErrorIs(t, l.Err(), lease.ErrReleased)
	require.ErrorIs(t, l.Start(context.Background()), lease.ErrStopped)
	_, ok := readRow(t, env.Pool, l.ID())
	require.False(t, ok)
}

// An id names one process start: a second holder is refused, and so is a
// new start under the id of a lease that ended, whose jobs would
// otherwise look alive again.
func TestLease_TakenIDIsRefused(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ctx := context.Background()
	first := startLease(t, env.Pool, lease.Config{TTL: 5 * time.Second})
	second, err := lease.New(env.Pool, lease.Config{ID: first.ID()})
	require.NoError(t, err)
	require.ErrorIs(t, second.Start(ctx), lease.ErrTaken)

	require.NoError(t, first.Stop(ctx))
	third, err := lease.New(env.Pool, lease.Config{ID: first.ID()})
	require.NoError(t, err)
	require.ErrorIs(t, third.Start(ctx), lease.ErrTaken)
	require.True(t, dead(t, env.Pool, first.ID()))
}

// The process's clock never reaches the database: with it an hour (or a
// century) ahead or behind, the lease expires TTL after the database's
// now(), renews, and is judged on the database's clock.
func TestLease_ExpiryIsOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	for _, offset := range []time.Duration{time.Hour, -time.Hour, 100 * 365 * 24 * time.Hour, -100 * 365 * 24 * time.Hour} {
		t.Run(offset.String(), func(t *testing.T) {
			t.Parallel()
			env := setup(t)
			const ttl = time.Minute
			l := startLease(t, env.Pool, lease.Config{TTL: ttl, Renew: 100 * time.Millisecond, Timeout: 10 * time.Second,
				Now: func() time.Time { return time.Now().Add(offset) }})
			r, _ := readRow(t, env.Pool, l.ID())
			require.Greater(t, r.Left, time.Duration(0))
			require.LessOrEqual(t, r.Left, ttl)
			require.Less(t, r.SinceNow.Abs(), testenv.Patience, "stamped by the database")

			waitRenewed(t, env.Pool, l.ID())
			r, _ = readRow(t, env.Pool, l.ID())
			require.LessOrEqual(t, r.Left, ttl)
			require.NoError(t, l.Err(), "the process's clock alone does not end the lease")
			require.False(t, dead(t, env.Pool, l.ID()))

			// Expired on the database's clock: dead, whatever the process's.
			env.Exec(`UPDATE jobguard_workers SET expires_at = now() - interval '1 microsecond' WHERE id = $1`, l.ID())
			require.True(t, dead(t, env.Pool, l.ID()))
		})
	}
}

// A renewal after the lease expired on the database's clock is refused,
// and the process learns it lost the lease; it does not renew again.
func TestLease_RenewalAfterExpiryIsRefusedAndReported(t *testing.T) {
	t.Parallel()
	env := setup(t)
	l := startLease(t, env.Pool, lease.Config{TTL: time.Minute, Renew: 50 * time.Millisecond, Timeout: 10 * time.Second})
	waitRenewed(t, env.Pool, l.ID())

	// What a process stopped for longer than its TTL finds on waking.
	env.Exec(`UPDATE jobguard_workers SET expires_at = now() - interval '1 second' WHERE id = $1`, l.ID())
	aged, _ := readRow(t, env.Pool, l.ID())
	took := waitFor(t, "Lost", func() bool {
		select {
		case <-l.Lost():
			return true
		default:
			return false
		}
	})
	t.Logf("lost %v after the expiry (one renewal period: 50ms)", took)
	require.ErrorIs(t, l.Err(), lease.ErrLost)

	time.Sleep(200 * time.Millisecond) // four renewal periods
	r, _ := readRow(t, env.Pool, l.ID())
	require.Equal(t, aged.Renewed, r.Renewed, "not renewed after the refusal")
	require.Equal(t, aged.Expires, r.Expires)
	require.True(t, dead(t, env.Pool, l.ID()))
}

// A renewal that cannot reach the database is retried within the lease:
// a path silent for less than the TTL loses nothing.
func TestLease_RenewalRetriedWithinTheLease(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pool, path := through(t, env)
	const ttl = time.Minute
	l := startLease(t, pool, lease.Config{TTL: ttl, Renew: 200 * time.Millisecond, Timeout: time.Second})
	waitRenewed(t, env.Pool, l.ID())

	path.Freeze()
	time.Sleep(3 * time.Second) // several renewals and their timeouts
	frozen, _ := readRow(t, env.Pool, l.ID())
	path.Thaw()
	took := waitFor(t, "a renewal after the thaw", func() bool {
		r, _ := readRow(t, env.Pool, l.ID())
		return r.Renewed.After(frozen.Renewed)
	})
	t.Logf("renewed %v after the thaw; the lease had %v left at the thaw", took, frozen.Left)
	require.NoError(t, l.Err())
	require.False(t, dead(t, env.Pool, l.ID()))
}

// A path that goes silent for longer than the TTL: the database sees the
// lease dead within the TTL of its last renewal, the process gives it up
// on its own measure, and, once the path flows again, the renewals it had
// sent are refused.
func TestLease_FrozenPathLosesTheLease(t *testing.T) {
	t.Parallel()
	env := setup(t)
	pool, path := through(t, env)
	const ttl, renew = 5 * time.Second, time.Second
	l := startLease(t, pool, lease.Config{TTL: ttl, Renew: renew, Timeout: 2 * time.Second})
	waitRenewed(t, env.Pool, l.ID())

	path.Freeze()
	frozeAt := dbNow(t, env.Pool)
	seen := waitFor(t, "the lease dead", func() bool { return dead(t, env.Pool, l.ID()) })
	r, _ := readRow(t, env.Pool, l.ID())
	gap := r.Expires.Sub(frozeAt)
	t.Logf("dead %v after the freeze (seen after %v); bound TTL+Renew = %v", gap, seen, ttl+renew)
	require.LessOrEqual(t, gap, ttl+renew)

	lost := waitFor(t, "Lost", func() bool {
		select {
		case <-l.Lost():
			return true
		default:
			return false
		}
	})
	t.Logf("the process gave the lease up %v after the database saw it dead", lost)
	require.ErrorIs(t, l.Err(), lease.ErrExpired)

	path.Thaw()
	time.Sleep(2 * ttl) // the held renewals land, and the release
	after, _ := readRow(t, env.Pool, l.ID())
	require.Equal(t, r.Renewed, after.Renewed, "a renewal landed after the lease expired")
	require.Equal(t, r.Expires, after.Expires)
	require.True(t, dead(t, env.Pool, l.ID()))
	require.NoError(t, l.Stop(context.Background()))
	require.ErrorIs(t, l.Err(), lease.ErrExpired, "Stop keeps the first cause")
}
