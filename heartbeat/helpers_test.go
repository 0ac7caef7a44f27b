package heartbeat_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// clock is a manual clock for Config.Now.
type clock struct{ ns atomic.Int64 }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *clock) Now() time.Time          { return epoch.Add(time.Duration(c.ns.Load())) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// bundle is one test's jobs table, a heartbeat over it on a manual clock,
// and a count of the rows the database really updated.
type bundle struct {
	jobs  *fixture.Jobs
	env   *testenv.Env
	hb    *heartbeat.Heartbeat
	clock *clock
}

func setup(t testing.TB, v fixture.Variant, opts ...testenv.Config) *bundle {
	t.Helper()
	env := testenv.New(t, opts...)
	return setupIn(t, env, v)
}

func setupIn(t testing.TB, env *testenv.Env, v fixture.Variant) *bundle {
	t.Helper()
	return setupJobs(t, fixture.Create(t, env, v))
}

func setupJobs(t testing.TB, jobs *fixture.Jobs) *bundle {
	t.Helper()
	env := jobs.Env
	countWrites(t, env, jobs.Table)
	c := &clock{}
	return &bundle{jobs: jobs, env: env, clock: c, hb: heartbeat.New(jobs.Guard, heartbeat.Config{Now: c.Now})}
}

// countWrites records every row the database updates in table, so tests
// count real writes rather than calls.
func countWrites(t testing.TB, env *testenv.Env, table jobguard.Table) {
	t.Helper()
	env.Exec(`CREATE TABLE row_writes (job_id text NOT NULL)`)
	env.Exec(`CREATE FUNCTION record_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO row_writes VALUES (to_jsonb(NEW) ->> TG_ARGV[0]);
    RETURN NEW;
END $$`)
	env.Exec(fmt.Sprintf(`CREATE TRIGGER record_write AFTER UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION record_write(%s)`,
		table.QualifiedName(), quoteLiteral(table.IDColumn)))
}

func quoteLiteral(s string) string { return "'" + s + "'" }

// writes returns how many times the database updated job id's row.
func (b *bundle) writes(t testing.TB, id string) int {
	t.Helper()
	var n int
	require.NoError(t, b.env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM row_writes WHERE job_id = $1`, id).Scan(&n))
	return n
}

// progress returns the stored progress of job id.
func (b *bundle) progress(t testing.TB, id string) int {
	t.Helper()
	tb := b.jobs.Table
	var p int
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), fmt.Sprintf(
		`SELECT %s FROM %s WHERE %s::text = $1`,
		ident.Quote(tb.ProgressColumn), tb.QualifiedName(), ident.Quote(tb.IDColumn)), id).Scan(&p))
	return p
}

// closedPool is a real pool that has been closed: every write through it
// fails at once without reaching the server.
func closedPool(env *testenv.Env) jobguard.DB {
	p := env.Connect(testenv.Config{})
	p.Close()
	return p
}

// eachVariant runs fn for every table shape in both pgx query modes.
func eachVariant(t *testing.T, fn func(t *testing.T, b *bundle)) {
	t.Helper()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) { fn(t, setupJobs(t, jobs)) })
}
