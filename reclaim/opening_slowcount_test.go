package reclaim_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/benchkit"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// countingRole is a pool config on env's schema, as a role that is not a
// superuser, whose count of the running jobs without a start does what
// plpgsql (a function body's statements) says for every row it reads,
// through a row policy on the jobs table; every other statement reads the
// rows at once.
func countingRole(t *testing.T, env *testenv.Env, name, plpgsql string) *pgxpool.Config {
	t.Helper()
	_, cfg := env.Role(name)
	env.Exec(`CREATE FUNCTION count_is_slow() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
		BEGIN
			IF current_query() LIKE '%count(*)%' AND current_query() LIKE '% IS NULL AND %' THEN
				` + plpgsql + `
			END IF;
			RETURN true;
		END $$`)
	env.Exec(`ALTER TABLE jobs ENABLE ROW LEVEL SECURITY`)
	env.Exec(`CREATE POLICY every_row ON jobs USING (count_is_slow())`)
	return cfg
}

// slowCountingPool is a pool on countingRole whose count takes secs
// seconds a row it reads (3600: until its statement is cancelled), as a
// count over a loaded table does. Its round trips are counted.
func slowCountingPool(t *testing.T, env *testenv.Env, secs float64) (*pgxpool.Pool, *benchkit.RoundTrips) {
	t.Helper()
	cfg := countingRole(t, env, "slow", `PERFORM pg_sleep(`+strconv.FormatFloat(secs, 'f', -1, 64)+`);`)
	trips := &benchkit.RoundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, trips
}

// insertUnstarted inserts a running job that has no start time, which no
// sweep over the table lists, and returns its id.
func insertUnstarted(t *testing.T, jobs *fixture.Jobs) string {
	t.Helper()
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	jobs.Env.Exec(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE id = $1", jobs.Table.QualifiedName(),
		ident.Quote(jobs.Table.StartedAtColumn)), id)
	return id
}

// The count of the running jobs without a start is noted when it fails,
// and never fails the sweep: a count that runs into the sweep's deadline
// leaves the listing its time and the writes theirs, so the stalled job is
// reclaimed all the same.
func TestSweep_UnstartedCountThatRunsIntoTheDeadlineStillReclaims(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stalled := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	unstarted := insertUnstarted(t, jobs)
	pool, _ := slowCountingPool(t, env, 3600)
	table, err := reclaim.NewTableSource(jobs.Guard, pool)
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: table, SweepTimeout: 2 * time.Second})

	rep, err := r.Sweep(context.Background())
	require.Equal(t, []string{stalled}, rep.ReclaimedIDs, "report %+v; error %v", rep, err)
	require.Equal(t, "FAILED", jobs.Read(t, stalled).Status)
	require.Equal(t, "PROCESSING", jobs.Read(t, unstarted).Status)
}

// The count travels in the opening batch only while it is quick: one
// slower than its budget there (a fifth of a second here, for the one row
// without a start) is cancelled, so that it holds the listing back no
// longer than the budget, and is read again after the reclaims, which
// takes one more round trip and gives the same number.
func TestSweep_UnstartedCountOverItsBudgetInTheBatchIsReadAfterTheReclaims(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stalled := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	insertUnstarted(t, jobs)
	pool, trips := slowCountingPool(t, env, 0.2)
	table, err := reclaim.NewTableSource(jobs.Guard, pool)
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{DB: pool, Source: table})

	before := trips.Load()
	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, reclaim.Report{Scanned: 1, Reclaimed: 1, NoStartTime: 1, ReclaimedIDs: []string{stalled}}, rep)
	require.Equal(t, int64(4), trips.Load()-before, "the batch, the page, the write, the count again")
}
