package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/retain"
	"github.com/jobguard/jobguard/settle"
)

var retainCommand = &command{
	name:  "retain",
	short: "remove settled records, finished artifacts and expired markers past their age; --dry-run previews",
	long: `
Retain removes the side-table rows nothing will act on again, once they are
older than their table's age by the database's clock (package retain):

  job_settlements      records settled (confirmed or given up) longer ago
                       than --records-age; pending records stay
  job_artifacts        artifacts compensated for good, and kept artifacts
                       whose thing no open artifact names, unchanged for
                       --artifacts-age; pending and owed artifacts stay
  job_reclaim_markers  markers expired longer ago than --markers-age; live
                       markers stay (only with --markers postgres)

Rows go in batches of --batch, each a short transaction that skips the rows
a worker holds (SKIP LOCKED) and waits at most a second for a table lock.
A table that does not exist is skipped and said so. The usage ledger is
never touched: it is the bill (see docs/operator.md to archive it).

An age is a duration (720h) or "keep", which leaves the table alone; 0 or a
negative age is refused, so that nothing is kept, or removed, by accident.

With --dry-run it removes nothing and prints, per table, how many rows a
run would remove now and the oldest and newest of them.

'jobguard run --retain' runs the same sweep every --retain-interval.`,
	flags: func(f *flags, s *settings) {
		f.section("Retain")
		f.boolean(&s.DryRun, "dry-run", "remove nothing; print what a run would remove")
		f.retainGroup(s)
		f.str(&s.Service.ArtifactsSchema, "artifacts-schema", "schema of the artifacts table (empty: the jobs table's)")
		f.str(&s.Service.ArtifactsTable, "artifacts-table", "name of the artifacts table")
		f.commonGroups(s)
		f.outputGroup(s, true)
	},
	run: runRetain,
}

// retainOpts are the retention settings, of retain and of run --retain.
type retainOpts struct {
	// Enabled runs the sweep in run. Off by default: removing rows is the
	// operator's decision, taken once the ages (and the ledger's archive)
	// are chosen.
	Enabled bool
	// Interval is run's pause between two retention sweeps.
	Interval time.Duration
	// RecordsSchema and RecordsTable say where settle's records are. An
	// empty schema is the jobs table's.
	RecordsSchema, RecordsTable string
	// The ages of the three tables.
	RecordsAge, ArtifactsAge, MarkersAge age
	// Batch is how many rows one batch removes.
	Batch int
}

func defaultRetain() retainOpts {
	return retainOpts{
		Interval:     retain.IntervalDefault,
		RecordsTable: settle.TableDefault,
		RecordsAge:   age{d: settle.RetainAgeDefault},
		ArtifactsAge: age{d: compensate.RetainAgeDefault},
		MarkersAge:   age{d: marker.RetainAfterExpiryDefault},
		Batch:        retain.BatchDefault,
	}
}

// retainGroup is the retention settings every command that sweeps takes.
func (f *flags) retainGroup(s *settings) {
	o := &s.Retain
	f.ageFlag(&o.RecordsAge, "records-age", "how long a settled record is kept after it settled, or keep")
	f.ageFlag(&o.ArtifactsAge, "artifacts-age", "how long a finished artifact is kept after its last change, or keep")
	f.ageFlag(&o.MarkersAge, "markers-age", "how long a reclaim marker is kept after it expired, or keep")
	f.integer(&o.Batch, "batch", "rows removed per batch, each a short transaction of its own")
	f.str(&o.RecordsSchema, "records-schema", "schema of settle's records table (empty: the jobs table's)")
	f.str(&o.RecordsTable, "records-table", "name of settle's records table")
}

// age is a table's age: a positive duration, or keep.
type age struct {
	d    time.Duration
	keep bool
}

func (a age) String() string {
	if a.keep {
		return "keep"
	}
	return a.d.String()
}

func (a *age) Set(v string) error {
	if v == "keep" {
		*a = age{keep: true}
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q: want a positive duration such as 720h, or keep", v)
	}
	*a = age{d: d}
	return nil
}

// UnmarshalJSON reads an age of the config file: "720h" or "keep".
func (a *age) UnmarshalJSON(b []byte) error {
	var d duration
	if err := d.UnmarshalJSON(b); err != nil {
		return err
	}
	return a.Set(string(d))
}

func (f *flags) ageFlag(p *age, name, usage string) {
	f.fs.Var(p, name, usage)
	f.add(name)
}

func (o retainOpts) check() error {
	switch {
	case o.Batch <= 0:
		return usageErr("--batch %d: want a positive number of rows", o.Batch)
	case o.Interval <= 0:
		return usageErr("--retain-interval %v: want a positive duration", o.Interval)
	}
	return nil
}

func runRetain(ctx context.Context, c *cli, s *settings, _ []string) error {
	if err := s.Retain.check(); err != nil {
		return err
	}
	cn, err := c.openDB(ctx, s)
	if err != nil {
		return err
	}
	defer cn.close()
	guard, err := cn.guard(ctx, s, nil)
	if err != nil {
		return err
	}
	sw, skipped, err := cn.retainSweeper(ctx, s, guard, nil)
	if err != nil {
		return err
	}
	var rep retain.Report
	if sw != nil && s.DryRun {
		rep, err = sw.Preview(ctx)
	} else if sw != nil {
		rep, err = sw.Sweep(ctx)
	}
	rep.DryRun = s.DryRun
	if perr := printRetain(c, s, rep, skipped); perr != nil {
		return perr
	}
	if err != nil {
		return fail(exitError, err, "what was removed before stands, and the report above counts it; run it again")
	}
	return nil
}

// retainSweeper is the retention sweep over the tables that exist, and the
// tables skipped, with why. It is nil when every table was skipped.
func (cn *conns) retainSweeper(ctx context.Context, s *settings, guard *jobguard.Guard, mp metric.MeterProvider) (*retain.Sweeper, []skippedTable, error) {
	o := s.Retain
	var tables []retain.Table
	var skipped []skippedTable
	add := func(r retain.Rule, a age) { tables = append(tables, retain.Table{Rule: r, Age: a.d, Keep: a.keep}) }
	schemaOr := func(schema string) string {
		if schema == "" {
			return s.Table.Schema
		}
		return schema
	}

	recSchema := schemaOr(o.RecordsSchema)
	if ok, err := cn.exists(ctx, recSchema, o.RecordsTable); err != nil {
		return nil, nil, err
	} else if !ok {
		skipped = append(skipped, skippedTable{o.RecordsTable, "no such table (settle is not in use)"})
	} else {
		st, err := settle.New(ctx, settle.Config{Guard: guard, DB: cn.pool, Schema: recSchema, Table: o.RecordsTable, Logger: cn.log})
		if err != nil {
			return nil, nil, fail(exitError, err, "apply every file of settle's migrations, or point --records-schema and --records-table at yours")
		}
		add(st.Retention(), o.RecordsAge)
	}

	artSchema := schemaOr(s.Service.ArtifactsSchema)
	switch ok, err := cn.exists(ctx, artSchema, s.Service.ArtifactsTable); {
	case err != nil:
		return nil, nil, err
	case !ok:
		skipped = append(skipped, skippedTable{s.Service.ArtifactsTable, "no such table (compensate is not in use)"})
	case !guard.Fenced():
		skipped = append(skipped, skippedTable{s.Service.ArtifactsTable, "the jobs table has no generation column, so compensate cannot serve it"})
	default:
		// The compensator is never called: retention only removes what is
		// finished.
		arts, err := compensate.New(ctx, compensate.Config{Guard: guard, DB: cn.pool, Schema: artSchema, Table: s.Service.ArtifactsTable,
			Compensators: map[string]compensate.Func{"file": removeFile}, Logger: cn.log})
		if err != nil {
			return nil, nil, fail(exitError, err, "apply every file of compensate's migrations, or point --artifacts-schema and --artifacts-table at yours")
		}
		add(arts.Retention(), o.ArtifactsAge)
	}

	if s.Shared.Markers != jobguard.MarkersPostgres {
		skipped = append(skipped, skippedTable{marker.TableName, "markers are in Redis (--markers redis), which expires them"})
	} else if ms, err := marker.NewPostgresStore(guard, marker.Config{}); err != nil {
		skipped = append(skipped, skippedTable{marker.TableName, "no such table on the search_path"})
	} else {
		add(ms.Retention(), o.MarkersAge)
	}
	if len(tables) == 0 {
		return nil, skipped, nil
	}
	sw, err := retain.New(retain.Config{DB: cn.pool, Tables: tables, Batch: o.Batch, Interval: o.Interval, Logger: cn.log, MeterProvider: mp})
	return sw, skipped, err
}

// exists reports whether schema.table exists (an empty schema: on the
// search_path).
func (cn *conns) exists(ctx context.Context, schema, table string) (bool, error) {
	name, err := ident.QuoteTable(schema, table)
	if err != nil {
		return false, usageErr("%v", err)
	}
	var ok bool
	if err := cn.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		return false, fail(exitError, err, "check that PostgreSQL at %s answers", cn.where)
	}
	return ok, nil
}

// skippedTable is a table retain left alone, and why.
type skippedTable struct{ Table, Why string }

type retainTableJSON struct {
	Table   string     `json:"table"`
	Age     string     `json:"age"`
	Removed int64      `json:"removed"`
	Batches int        `json:"batches"`
	Oldest  *time.Time `json:"oldest,omitempty"`
	Newest  *time.Time `json:"newest,omitempty"`
	Skipped string     `json:"skipped,omitempty"`
	Error   string     `json:"error,omitempty"`
}

// printRetain prints the report: per table, its age, the rows removed (or,
// with --dry-run, to be removed) and the oldest and newest of them.
func printRetain(c *cli, s *settings, rep retain.Report, skipped []skippedTable) error {
	var rows []retainTableJSON
	for _, t := range rep.Tables {
		r := retainTableJSON{Table: t.Table, Age: t.Age.String(), Removed: t.Removed, Batches: t.Batches, Oldest: t.Oldest, Newest: t.Newest}
		if t.Keep {
			r.Age, r.Skipped = "keep", "kept forever"
		}
		if t.Err != nil {
			r.Error = t.Err.Error()
		}
		rows = append(rows, r)
	}
	for _, sk := range skipped {
		rows = append(rows, retainTableJSON{Table: sk.Table, Skipped: sk.Why})
	}
	if s.JSON {
		return printJSON(c.stdout, struct {
			DryRun bool              `json:"dry_run"`
			Tables []retainTableJSON `json:"tables"`
		}{rep.DryRun, rows})
	}
	verb := "removed"
	if rep.DryRun {
		verb = "would remove"
		fmt.Fprintf(c.stdout, "Dry run: nothing was removed.\n\n")
	}
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	t := newTable(c.stdout, "table", "age", verb, "oldest", "newest", "note")
	for _, r := range rows {
		note := r.Skipped
		if r.Error != "" {
			note = "stopped: " + r.Error
		}
		if r.Skipped != "" && r.Age == "" {
			t.row(r.Table, "-", "-", "-", "-", note)
			continue
		}
		t.row(r.Table, r.Age, fmt.Sprint(r.Removed), at(r.Oldest), at(r.Newest), note)
	}
	return t.flush()
}
