package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
)

// workersOf inserts a live, an expired and a released lease, each as its
// own process would leave it, and returns their ids.
func workersOf(t *testing.T, env *testenv.Env) (live, expired, released string) {
	t.Helper()
	env.Exec(`INSERT INTO jobguard_workers (id, host, pid, expires_at) VALUES
		('live', 'h', 1, now() + interval '1 hour'),
		('expired', 'h', 2, now() - interval '1 microsecond'),
		('released', 'h', 3, now())`)
	return "live", "expired", "released"
}

func TestWorkers_LiveIsAPredicateOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	env := setup(t)
	live, expired, released := workersOf(t, env)
	// A jobs table of one's own, its owner a column of any type that
	// reads as text; an alias of the caller's own.
	env.Exec(`CREATE TABLE jobs (id int PRIMARY KEY, owner varchar(64))`)
	env.Exec(`INSERT INTO jobs VALUES (1, $1), (2, $2), (3, $3), (4, 'never-registered'), (5, NULL)`, live, expired, released)

	pred, err := lease.Workers{}.Live(`w."owner"`)
	require.NoError(t, err)
	rows, err := env.Pool.Query(context.Background(), `SELECT w.id FROM jobs AS w WHERE `+pred+` ORDER BY 1`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Equal(t, []int32{1}, ids, "only the live owner; expired, released, unknown and NULL are not live")

	rows, err = env.Pool.Query(context.Background(), `SELECT w.id FROM jobs AS w WHERE w."owner" IS NOT NULL AND NOT `+pred+` ORDER BY 1`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	require.Equal(t, []int32{2, 3, 4}, ids, "the jobs of dead owners")
}

func TestWorkers_LiveIsOnePrimaryKeyProbe(t *testing.T) {
	t.Parallel()
	env := setup(t)
	env.Exec(`INSERT INTO jobguard_workers (id, host, pid, expires_at)
		SELECT 'w' || g, 'h', g, now() + interval '1 hour' FROM generate_series(1, 5000) g`)
	env.Exec(`ANALYZE jobguard_workers`)
	pred, err := lease.Workers{}.Live("$1")
	require.NoError(t, err)
	rows, err := env.Pool.Query(context.Background(), `EXPLAIN (COSTS OFF) SELECT `+pred, "w42")
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, strings.Join(lines, "\n"), "jobguard_workers_pkey", "the probe uses the primary key")
}

func TestWorkers_LiveRefusesAnEmptyOwnerOrABadTable(t *testing.T) {
	t.Parallel()
	_, err := lease.Workers{}.Live(" ")
	require.ErrorContains(t, err, "owner")
	_, err = lease.Workers{Table: "a\x00b"}.Live("x")
	require.ErrorContains(t, err, "Table")
	pred, err := lease.Workers{Schema: "s", Table: "my workers"}.Live("x")
	require.NoError(t, err)
	require.Contains(t, pred, `"s"."my workers"`)
}

func TestWorkers_DeadListsTheDeadInTheOrderGiven(t *testing.T) {
	t.Parallel()
	env := setup(t)
	live, expired, released := workersOf(t, env)
	got, err := lease.Workers{}.Dead(context.Background(), env.Pool, []string{released, live, "never-registered", expired})
	require.NoError(t, err)
	require.Equal(t, []string{released, "never-registered", expired}, got)

	got, err = lease.Workers{}.Dead(context.Background(), env.Pool, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestWorkers_PruneDeletesOnlyLongEndedLeases(t *testing.T) {
	t.Parallel()
	env := setup(t)
	live, expired, released := workersOf(t, env)
	env.Exec(`INSERT INTO jobguard_workers (id, host, pid, expires_at) VALUES ('old', 'h', 4, now() - interval '2 days')`)
	ctx := context.Background()
	n, err := lease.Workers{}.Prune(ctx, env.Pool, 24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	for _, id := range []string{live, expired, released} {
		_, ok := readRow(t, env.Pool, id)
		require.True(t, ok, id)
	}
	require.True(t, dead(t, env.Pool, "old"), "a pruned owner stays dead")

	_, err = lease.Workers{}.Prune(ctx, env.Pool, -time.Second)
	require.ErrorContains(t, err, "age")
	// The longest duration crosses without overflow: nothing is that old.
	n, err = lease.Workers{}.Prune(ctx, env.Pool, time.Duration(1<<63-1))
	require.NoError(t, err)
	require.Zero(t, n)
}
