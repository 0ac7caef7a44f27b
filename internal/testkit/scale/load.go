// Package scale loads a day of a large deployment's history into a schema
// of its own, for the benchmarks that measure jobguard at ten million jobs:
// the finished jobs, their finalize records, ledger rows, artifacts and
// reclaim markers, and the jobs running right now, some of them stuck.
//
// The history is written with COPY into tables without indexes, and the
// indexes are built after, as a restore would. It is loaded once and kept:
// a later run that finds the same size in the schema's scale_info table
// reuses it and only replaces the running jobs, whose times are relative to
// now. Drop reports what a reload or the end of the measurements removes.
package scale

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// Size is how much history a schema holds.
type Size struct {
	// Finished is the number of finished jobs: a day's history.
	Finished int
	// Running is the number of jobs running now, of every type.
	Running int
	// StuckPercent is the share of Running that is stuck: over its type's
	// limit, with no progress for an hour.
	StuckPercent int
}

// Types are the job types, with their limits, shares of the jobs (in
// percent) and the longest runtime of a normal run.
var Types = []Type{
	{Name: "chapter", Limit: 10 * time.Minute, Share: 40, Longest: 5 * time.Minute},
	{Name: "video", Limit: time.Hour, Share: 20, Longest: 30 * time.Minute},
	{Name: "export", Limit: 5 * time.Minute, Share: 25, Longest: 2 * time.Minute},
	{Name: "embed", Limit: 2 * time.Minute, Share: 15, Longest: time.Minute},
}

// Type is one job type of the load.
type Type struct {
	Name    string
	Limit   time.Duration
	Share   int
	Longest time.Duration
}

// typeOf spreads the jobs over Types by their shares.
func typeOf(i int) Type {
	p := int(mix(uint64(i)^0x7f4a7c15) % 100)
	for _, t := range Types {
		if p < t.Share {
			return t
		}
		p -= t.Share
	}
	return Types[0]
}

// mix is splitmix64: cheap, deterministic, well spread.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// ID is the id of job i of the load, a random-looking version 4 uuid that
// every table's COPY computes alike. Running jobs are numbered from
// RunningBase, so that their ids never meet the history's.
func ID(i int) [16]byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], mix(uint64(i)))
	binary.BigEndian.PutUint64(b[8:], mix(uint64(i)^0x5bd1e995))
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return b
}

// RunningBase numbers the running jobs.
const RunningBase = 1 << 40

// Text is the canonical spelling of a uuid, as the side tables key it.
func Text(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// Outcome of finished job i: one in fifty failed, half of those reclaimed.
func failed(i int) bool    { return mix(uint64(i)^0xabcdef)%50 == 0 }
func reclaimed(i int) bool { return failed(i) && mix(uint64(i)^0x123457)%2 == 0 }

// ReclaimedReason is the failure reason of the reclaimed jobs of the load.
const ReclaimedReason = jobguard.ReclaimedReasonDefault

// Schema is one loaded schema.
type Schema struct {
	Name string
	Size Size
	// Key is the jobs table's key, as the side tables store it.
	Key string
	// Loaded says whether Open loaded the history (false: it was there).
	Loaded bool
	// LoadTime is how long the history took: COPY, then indexes, then
	// VACUUM ANALYZE.
	CopyTime, IndexTime, VacuumTime time.Duration
}

// sideTables are the tables that grow with the history, in load order.
var sideTables = []string{"jobs", "job_settlements", "usage_ledger", "job_artifacts", marker.TableName}

// Open makes sure schema name on admin's database holds a history of size
// and a fresh set of running jobs, loading what is missing. logf reports
// progress.
func Open(ctx context.Context, admin *pgxpool.Pool, name string, size Size, logf func(string, ...any)) (*Schema, error) {
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	c := conn.Conn()
	q := ident.Quote(name)
	s := &Schema{Name: name, Size: size}
	for _, stmt := range []string{
		`CREATE SCHEMA IF NOT EXISTS ` + q,
		`SET search_path TO ` + q,
		`CREATE TABLE IF NOT EXISTS scale_info (finished bigint NOT NULL, running int NOT NULL, loaded_at timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := c.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("scale: %s: %w", stmt, err)
		}
	}
	// One process loads at a time: another waits here, then finds the
	// history loaded.
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock(hashtext('jobguard scale ' || $1))`, name); err != nil {
		return nil, fmt.Errorf("scale: lock %s: %w", name, err)
	}
	defer func() {
		_, _ = c.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext('jobguard scale ' || $1))`, name)
	}()
	have, err := loaded(ctx, c, name, size, logf)
	if err != nil {
		return nil, err
	}
	// The migrations run only before a load: run again over the history,
	// each of their checks would read ten million rows.
	if have == 0 {
		if err := migrate(ctx, c); err != nil {
			return nil, err
		}
	}
	g, err := jobguard.New(ctx, c, jobguard.DefaultTable())
	if err != nil {
		return nil, fmt.Errorf("scale: guard: %w", err)
	}
	s.Key = g.TableKey()
	if have == 0 {
		// A load that stopped half way leaves rows and no scale_info:
		// loading over them would double them.
		var rows bool
		if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT FROM jobs WHERE status IN ('COMPLETED', 'FAILED'))`).Scan(&rows); err != nil {
			return nil, err
		}
		if rows {
			return nil, fmt.Errorf("scale: %s holds a history that did not finish loading: drop it first (DROP SCHEMA %s CASCADE)", name, q)
		}
		if err := s.load(ctx, c, logf); err != nil {
			return nil, err
		}
		s.Loaded = true
	}
	if err := s.running(ctx, c, logf); err != nil {
		return nil, err
	}
	return s, nil
}

// migrate applies every bundled migration, each safe to run again.
func migrate(ctx context.Context, c *pgx.Conn) error {
	for _, m := range []struct{ name, sql string }{
		{"jobguard", jobguard.Migration}, {"marker", marker.Migration}, {"reclaim", reclaim.Migration},
		{"usage", usage.Migration}, {"settle", settle.Migration}, {"compensate", compensate.Migration},
	} {
		if _, err := c.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("scale: %s migration: %w", m.name, err)
		}
	}
	return nil
}

// index is an index or a key of a side table, as the catalog prints it.
type index struct {
	table, name, def string
	constraint       bool
}

// indexes reads the indexes and keys of the side tables.
func indexes(ctx context.Context, c *pgx.Conn) ([]index, error) {
	rows, err := c.Query(ctx, `
		SELECT t.relname, i.relname, coalesce(pg_get_constraintdef(k.oid), pg_get_indexdef(i.oid)), k.oid IS NOT NULL
		FROM pg_index x
		JOIN pg_class i ON i.oid = x.indexrelid
		JOIN pg_class t ON t.oid = x.indrelid
		LEFT JOIN pg_constraint k ON k.conindid = x.indexrelid AND k.conrelid = x.indrelid
		WHERE t.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) AND t.relname = ANY ($1)
		ORDER BY t.relname, i.relname`, sideTables)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var ix index
		err := r.Scan(&ix.table, &ix.name, &ix.def, &ix.constraint)
		return ix, err
	})
}

// loaded is the number of finished jobs schema name holds already (0: none
// loaded); a history of another size is an error.
func loaded(ctx context.Context, c *pgx.Conn, name string, size Size, logf func(string, ...any)) (int64, error) {
	var have int64
	err := c.QueryRow(ctx, `SELECT finished FROM scale_info`).Scan(&have)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("scale: read scale_info: %w", err)
	case have != int64(size.Finished):
		return 0, fmt.Errorf("scale: %s holds %d finished jobs, not %d: drop it first (DROP SCHEMA %s CASCADE)",
			name, have, size.Finished, ident.Quote(name))
	}
	logf("scale: %s already holds %d finished jobs: reusing them", name, have)
	return have, nil
}

// load writes the history: the indexes dropped, every table copied, the
// indexes built again, then VACUUM ANALYZE (autovacuum may be off).
func (s *Schema) load(ctx context.Context, c *pgx.Conn, logf func(string, ...any)) error {
	ixs, err := indexes(ctx, c)
	if err != nil {
		return fmt.Errorf("scale: read indexes: %w", err)
	}
	if err := dropIndexes(ctx, c, ixs); err != nil {
		return err
	}
	start := time.Now()
	if err := s.copyAll(ctx, c, logf); err != nil {
		return err
	}
	s.CopyTime = time.Since(start)

	start = time.Now()
	if err := s.buildIndexes(ctx, c, ixs, logf); err != nil {
		return err
	}
	s.IndexTime = time.Since(start)
	start = time.Now()
	for _, t := range sideTables {
		if _, err := c.Exec(ctx, `VACUUM ANALYZE `+ident.Quote(t)); err != nil {
			return fmt.Errorf("scale: vacuum %s: %w", t, err)
		}
	}
	s.VacuumTime = time.Since(start)
	if _, err := c.Exec(ctx, `INSERT INTO scale_info (finished, running) VALUES ($1, $2)`, s.Size.Finished, s.Size.Running); err != nil {
		return err
	}
	logf("scale: %s: loaded in %s (copy %s, indexes %s, vacuum %s)", s.Name,
		(s.CopyTime + s.IndexTime + s.VacuumTime).Round(time.Second), s.CopyTime.Round(time.Second),
		s.IndexTime.Round(time.Second), s.VacuumTime.Round(time.Second))
	return nil
}

// dropIndexes drops the indexes (and key constraints) ixs, so that COPY
// writes the tables alone.
func dropIndexes(ctx context.Context, c *pgx.Conn, ixs []index) error {
	for _, ix := range ixs {
		drop := `DROP INDEX ` + ident.Quote(ix.name)
		if ix.constraint {
			drop = `ALTER TABLE ` + ident.Quote(ix.table) + ` DROP CONSTRAINT ` + ident.Quote(ix.name)
		}
		if _, err := c.Exec(ctx, drop); err != nil {
			return fmt.Errorf("scale: %s: %w", drop, err)
		}
	}
	return nil
}

// buildIndexes builds ixs again, with room to sort.
func (s *Schema) buildIndexes(ctx context.Context, c *pgx.Conn, ixs []index, logf func(string, ...any)) error {
	if _, err := c.Exec(ctx, `SET maintenance_work_mem = '1GB'`); err != nil {
		return err
	}
	for _, ix := range ixs {
		t0 := time.Now()
		build := ix.def
		if ix.constraint {
			build = `ALTER TABLE ` + ident.Quote(ix.table) + ` ADD CONSTRAINT ` + ident.Quote(ix.name) + ` ` + ix.def
		}
		if _, err := c.Exec(ctx, build); err != nil {
			return fmt.Errorf("scale: %s: %w", build, err)
		}
		logf("scale: %s: built %s in %s", s.Name, ix.name, time.Since(t0).Round(time.Second))
	}
	_, err := c.Exec(ctx, `RESET maintenance_work_mem`)
	return err
}

// copySpec is one table's COPY: its columns, row i's values, and whether
// job i has a row in it (nil: every job).
type copySpec struct {
	table string
	cols  []string
	row   func(i int) []any
	keep  func(i int) bool
}

// copyAll copies every table's rows of the history.
func (s *Schema) copyAll(ctx context.Context, c *pgx.Conn, logf func(string, ...any)) error {
	n := s.Size.Finished
	for _, cp := range s.copies() {
		t0 := time.Now()
		i := -1
		src := pgx.CopyFromFunc(func() ([]any, error) {
			for i++; i < n; i++ {
				if cp.keep == nil || cp.keep(i) {
					return cp.row(i), nil
				}
			}
			return nil, nil
		})
		got, err := c.CopyFrom(ctx, pgx.Identifier{cp.table}, cp.cols, src)
		if err != nil {
			return fmt.Errorf("scale: copy %s: %w", cp.table, err)
		}
		logf("scale: %s: copied %d rows into %s in %s", s.Name, got, cp.table, time.Since(t0).Round(time.Second))
	}
	return nil
}

// copies are the tables of the history, each row a function of the job's
// number: a day of jobs up to now, in order.
func (s *Schema) copies() []copySpec {
	n := s.Size.Finished
	end := time.Now().Truncate(time.Second)
	day := 24 * time.Hour
	step := day / time.Duration(n)
	at := func(i int) (started, finished time.Time) {
		started = end.Add(-day + time.Duration(i)*step)
		t := typeOf(i)
		run := time.Second + time.Duration(mix(uint64(i)^0x55)%uint64(t.Longest-time.Second))
		return started, started.Add(run)
	}
	return []copySpec{
		{"jobs", []string{"id", "type", "status", "generation", "progress", "failure_reason", "started_at", "created_at", "updated_at"},
			func(i int) []any {
				st, fin := at(i)
				status, reason := "COMPLETED", any(nil)
				if failed(i) {
					status, reason = "FAILED", "encoder exited with status 1"
					if reclaimed(i) {
						reason = ReclaimedReason
					}
				}
				return []any{ID(i), typeOf(i).Name, status, int64(1), int32(100), reason, st, st.Add(-2 * time.Second), fin}
			}, nil},
		{"job_settlements", []string{"jobs_table", "job_id", "generation", "state", "updates", "pending", "usage", "attempts",
			"next_attempt_at", "created_at", "updated_at", "settled_at"},
			func(i int) []any {
				_, fin := at(i)
				id := Text(ID(i))
				updates := `[{"name": "video", "args": {"video_id": "v-` + id[:8] + `", "duration_ms": 61250}}, {"name": "content", "args": {"video_id": "v-` + id[:8] + `"}}]`
				use := fmt.Sprintf(`[{"account": "acct-%d", "meter": "video_ms", "quantity": %d}]`, i%50000, 1000+i%60000)
				return []any{s.Key, id, int64(1), "confirmed", updates, []string{}, use, int32(1), fin, fin, fin.Add(time.Second), fin.Add(time.Second)}
			}, func(i int) bool { return !failed(i) }},
		{"usage_ledger", []string{"jobs_table", "job_id", "meter", "generation", "account", "quantity", "attributes", "recorded_at"},
			func(i int) []any {
				_, fin := at(i)
				return []any{s.Key, Text(ID(i)), "video_ms", int64(1), fmt.Sprintf("acct-%d", i%50000), int64(1000 + i%60000),
					`{"model": "enc-2", "resolution": "1080p"}`, fin.Add(time.Second)}
			}, func(i int) bool { return !failed(i) }},
		{"job_artifacts", []string{"jobs_table", "job_id", "generation", "kind", "ref", "state", "created_at", "updated_at", "changed_at"},
			func(i int) []any {
				st, fin := at(i)
				id := Text(ID(i))
				state := "kept"
				if failed(i) {
					state = "done"
				}
				return []any{s.Key, id, int64(1), "file", "s3://media/" + id + ".mp4", state, st, fin, fin}
			}, nil},
		{marker.TableName, []string{"jobs_table", "job_id", "generation", "reason", "reclaimed_at", "expires_at"},
			func(i int) []any {
				_, fin := at(i)
				return []any{s.Key, Text(ID(i)), int64(1), ReclaimedReason, fin, fin.Add(7 * day)}
			}, reclaimed},
	}
}

// Stuck says whether running job i is stuck.
func (s *Schema) Stuck(i int) bool {
	return s.Size.StuckPercent > 0 && i%(100/s.Size.StuckPercent) == 0
}

// running replaces the running jobs (and whatever else is not finished)
// with Size.Running fresh ones on the database's clock: started within
// their type's limit and making progress, or stuck.
func (s *Schema) running(ctx context.Context, c *pgx.Conn, logf func(string, ...any)) error {
	t0 := time.Now()
	// The jobs of an earlier run, reclaimed or finished since, go with
	// those still running, and so do their markers.
	ids := make([][16]byte, s.Size.Running)
	texts := make([]string, s.Size.Running)
	for i := range ids {
		ids[i] = ID(RunningBase + i)
		texts[i] = Text(ids[i])
	}
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`DELETE FROM jobs WHERE status IN ('QUEUED', 'PROCESSING')`, nil},
		// A benchmark's own jobs, left by a run that was stopped.
		{`DELETE FROM jobs WHERE type = 'bench'`, nil},
		{`DELETE FROM jobs WHERE id = ANY ($1)`, []any{ids}},
		{`DELETE FROM job_reclaim_markers WHERE jobs_table = $1 AND job_id = ANY ($2)`, []any{s.Key, texts}},
	} {
		if _, err := c.Exec(ctx, stmt.sql, stmt.args...); err != nil {
			return fmt.Errorf("scale: clear the running jobs: %w", err)
		}
	}
	for _, t := range Types {
		if _, err := c.Exec(ctx, `INSERT INTO job_type_limits (job_type, max_runtime) VALUES ($1, $2)
			ON CONFLICT (job_type) DO UPDATE SET max_runtime = excluded.max_runtime, mode = 'reclaim'`, t.Name, t.Limit); err != nil {
			return fmt.Errorf("scale: limits: %w", err)
		}
	}
	var now time.Time
	if err := c.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return err
	}
	i := -1
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i++; i >= s.Size.Running {
			return nil, nil
		}
		t := typeOf(i)
		r := mix(uint64(i) ^ 0x77)
		started := now.Add(-time.Duration(r % uint64(t.Limit*8/10)))
		progressed := now.Add(-time.Duration(r % uint64(time.Minute)))
		if s.Stuck(i) {
			started = now.Add(-2*t.Limit - time.Hour)
			progressed = now.Add(-time.Hour)
		}
		if progressed.Before(started) {
			progressed = started
		}
		return []any{ID(RunningBase + i), t.Name, "PROCESSING", int64(1), int32(r % 100), started, started, progressed}, nil
	})
	if _, err := c.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"id", "type", "status", "generation", "progress", "started_at", "created_at", "updated_at"}, src); err != nil {
		return fmt.Errorf("scale: copy the running jobs: %w", err)
	}
	if _, err := c.Exec(ctx, `ANALYZE jobs`); err != nil {
		return err
	}
	logf("scale: %s: %d running jobs (%d%% stuck) in %s", s.Name, s.Size.Running, s.Size.StuckPercent, time.Since(t0).Round(time.Millisecond))
	return nil
}
