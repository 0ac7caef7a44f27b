package scale_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/endpoint"
	"github.com/jobguard/jobguard/internal/testkit/scale"
	"github.com/jobguard/jobguard/jobguard"
)

// Env is the variable that runs the scale benchmarks; without it they skip
// at once, so the suite's command never loads anything.
const Env = "JOBGUARD_SCALE"

// FinishedEnv overrides the large history's number of finished jobs.
const FinishedEnv = "JOBGUARD_SCALE_FINISHED"

// The two histories every figure is measured on: a day of ten million
// finished jobs, and a small one of ten thousand. Both have the same
// running jobs, so that what differs is the history alone.
var (
	large = scale.Size{Finished: 10_000_000, Running: 100_000, StuckPercent: 1}
	small = scale.Size{Finished: 10_000, Running: 100_000, StuckPercent: 1}
)

// bundle is one loaded schema and a pool on it.
type bundle struct {
	*scale.Schema
	pool  *pgxpool.Pool
	guard *jobguard.Guard
}

var opened = struct {
	sync.Mutex
	m map[string]*bundle
}{m: map[string]*bundle{}}

// need skips tb unless Env is set.
func need(tb testing.TB) {
	tb.Helper()
	if os.Getenv(Env) != "1" {
		tb.Skipf("%s=1 runs the scale benchmarks (they load ten million jobs)", Env)
	}
}

// sizes are the two histories, named as the benchmarks' sub-names.
func sizes() []struct {
	name string
	size scale.Size
} {
	l := large
	if v := os.Getenv(FinishedEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			panic(fmt.Sprintf("%s=%q: want a positive number", FinishedEnv, v))
		}
		l.Finished = n
	}
	return []struct {
		name string
		size scale.Size
	}{{"finished=10k", small}, {"finished=" + short(l.Finished), l}}
}

func short(n int) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// open returns the schema holding size, loading it the first time in this
// process or ever, with its running jobs fresh the first time in this
// process.
func open(tb testing.TB, size scale.Size) *bundle {
	tb.Helper()
	need(tb)
	name := "jobguard_scale_" + strings.ToLower(short(size.Finished))
	opened.Lock()
	defer opened.Unlock()
	if b := opened.m[name]; b != nil {
		return b
	}
	ctx := context.Background()
	ep, err := endpoint.Resolve(ctx, nil)
	require.NoError(tb, err)
	admin, err := pgxpool.New(ctx, ep.DatabaseURL)
	require.NoError(tb, err)
	defer admin.Close()
	s, err := scale.Open(ctx, admin, name, size, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) })
	require.NoError(tb, err)
	u, err := url.Parse(ep.DatabaseURL)
	require.NoError(tb, err)
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(tb, err)
	cfg.MaxConns = 8
	// A commit's flush to disk costs the same at every size, and on a
	// shared machine it is most of a write and most of its noise: the
	// figures are the statements' own cost. Durability is the server's
	// business, not what is measured here.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(tb, err)
	g, err := jobguard.NewWithConfig(ctx, pool, jobguard.DefaultTable(), jobguard.GuardConfig{
		Shared: jobguard.Shared{Markers: jobguard.MarkersPostgres, NoticeChannel: name}})
	require.NoError(tb, err)
	b := &bundle{Schema: s, pool: pool, guard: g}
	opened.m[name] = b
	return b
}

// exec runs sql on the bundle's schema.
func (b *bundle) exec(tb testing.TB, sql string, args ...any) int64 {
	tb.Helper()
	tag, err := b.pool.Exec(context.Background(), sql, args...)
	require.NoError(tb, err, sql)
	return tag.RowsAffected()
}

// TestLoad loads both histories (or finds them loaded) and checks what
// they hold.
func TestLoad(t *testing.T) {
	need(t)
	for _, s := range sizes() {
		t0 := time.Now()
		b := open(t, s.size)
		var finished, running, records int
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM jobs WHERE status IN ('COMPLETED', 'FAILED')),
			(SELECT count(*) FROM jobs WHERE status = 'PROCESSING'),
			(SELECT count(*) FROM job_settlements)`).Scan(&finished, &running, &records))
		t.Logf("%s: %d finished, %d running, %d records (%s)", s.name, finished, running, records, time.Since(t0).Round(time.Second))
		require.GreaterOrEqual(t, finished, s.size.Finished)
		require.Equal(t, s.size.Running, running)
	}
}

// TestDisk prints what each side table and each of its indexes takes per
// million finished jobs, as a markdown table.
func TestDisk(t *testing.T) {
	need(t)
	s := sizes()[1]
	b := open(t, s.size)
	ctx := context.Background()
	rows, err := b.pool.Query(ctx, `
		SELECT c.relname, NULL::text, pg_total_relation_size(c.oid), pg_relation_size(c.oid), c.reltuples::bigint
		FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
		  AND c.relkind = 'r' AND c.relname = ANY ($1)
		UNION ALL
		SELECT t.relname, i.relname, NULL, pg_relation_size(i.oid), i.reltuples::bigint
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
		WHERE t.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) AND t.relname = ANY ($1)
		ORDER BY 1, 2 NULLS FIRST`, []string{"jobs", "job_settlements", "usage_ledger", "job_artifacts", "job_reclaim_markers"})
	require.NoError(t, err)
	per := float64(s.size.Finished) / 1e6
	mb := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/per/(1<<20)) }
	out := "| table / index | rows | total MiB per 1M jobs | heap or index MiB per 1M jobs |\n|---|---:|---:|---:|\n"
	for rows.Next() {
		var table string
		var index *string
		var total *int64
		var rel, tuples int64
		require.NoError(t, rows.Scan(&table, &index, &total, &rel, &tuples))
		if index == nil {
			out += fmt.Sprintf("| **%s** | %d | %s | %s |\n", table, tuples, mb(*total), mb(rel))
		} else {
			out += fmt.Sprintf("| └ %s | %d | | %s |\n", *index, tuples, mb(rel))
		}
	}
	require.NoError(t, rows.Err())
	t.Logf("%s: per million of %d finished jobs (and %d running)\n%s", s.name, s.size.Finished, s.size.Running, out)
}
