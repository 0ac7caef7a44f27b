package reclaim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// slowCountingPool is a pool on env's schema, as a role that is not a
// superuser, whose count of the running jobs without a start takes until
// its statement is cancelled, as a count over a loaded table does: every
// row the count reads passes a row policy that sleeps while the statement
// is that count. Every other statement reads the rows at once.
func slowCountingPool(t *testing.T, env *testenv.Env) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	role := strings.ToLower("jgt_slow_" + env.Schema)
	env.Exec(fmt.Sprintf(`CREATE ROLE %s LOGIN`, ident.Quote(role)))
	t.Cleanup(func() {
		_, _ = env.Pool.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s`, ident.Quote(role)))
		_, _ = env.Pool.Exec(context.Background(), fmt.Sprintf(`DROP ROLE %s`, ident.Quote(role)))
	})
	env.Exec(fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, ident.Quote(env.Schema), ident.Quote(role)))
	env.Exec(fmt.Sprintf(`GRANT ALL ON ALL TABLES IN SCHEMA %s TO %s`, ident.Quote(env.Schema), ident.Quote(role)))
	env.Exec(`CREATE FUNCTION count_is_slow() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
		BEGIN
			IF current_query() LIKE '%count(*)%' AND current_query() LIKE '% IS NULL AND %' THEN
				PERFORM pg_sleep(3600);
			END IF;
			RETURN true;
		END $$`)
	env.Exec(`ALTER TABLE jobs ENABLE ROW LEVEL SECURITY`)
	env.Exec(`CREATE POLICY every_row ON jobs USING (count_is_slow())`)
	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
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
	unstarted := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	env.Exec(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE id = $1", jobs.Table.QualifiedName(),
		ident.Quote(jobs.Table.StartedAtColumn)), unstarted)
	pool := slowCountingPool(t, env)
	table, err := reclaim.NewTableSource(jobs.Guard, pool)
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: table, SweepTimeout: 2 * time.Second})

	rep, err := r.Sweep(context.Background())
	require.Equal(t, []string{stalled}, rep.ReclaimedIDs, "report %+v; error %v", rep, err)
	require.Equal(t, "FAILED", jobs.Read(t, stalled).Status)
	require.Equal(t, "PROCESSING", jobs.Read(t, unstarted).Status)
}
