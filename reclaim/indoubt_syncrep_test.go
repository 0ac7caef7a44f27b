package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// A reclaim that committed on the primary while it waited for a
// synchronous standby, and whose session was then terminated (a
// switchover's shutdown, an administrator), is announced: the server's
// FATAL error came after the commit, so the outcome is in doubt, and the
// rows say the reclaim committed. It runs against a server with a
// synchronous standby that never answers (synchronous_standby_names set,
// synchronous_commit local by default).
func TestSweep_ReclaimCommittedBeforeItsSessionWasTerminatedIsAnnounced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	var standbys string
	require.NoError(t, env.Pool.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&standbys))
	if standbys == "" {
		t.Skip("the server waits for no synchronous standby")
	}
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour})
	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pub := &recorder{}
	r, logs := newReclaimer(t, jobs, reclaim.Config{DB: pool, Notices: pub})

	terminated := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(testenv.Patience); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			var n int
			if err := env.Pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE wait_event = 'SyncRep' AND datname = current_database()`).Scan(&n); err != nil || n > 0 {
				terminated <- err
				return
			}
		}
		terminated <- context.DeadlineExceeded
	}()
	rep, err := r.Sweep(ctx)
	require.NoError(t, <-terminated)
	require.Error(t, err, "the session was terminated")
	require.Equal(t, jobs.Table.Statuses.Failed, jobs.Read(t, id).Status, "the reclaim committed on the primary")
	require.Equal(t, []string{id}, rep.ReclaimedIDs, logs.String())
	require.Equal(t, []jobguard.Execution{{JobID: id, Generation: 3}}, pub.execs)
	require.True(t, hasMarker(t, jobs, id), "a committed reclaim gets its Redis marker")
}
