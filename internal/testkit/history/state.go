package history

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// State is the database at the end of the run, as data.
type State struct {
	// Jobs maps a job id, as the jobs table prints it, to its row.
	Jobs map[string]Job
	// Products are the rows a completed job leaves (chapters, lessons).
	Products []Product
	// Ready are the parents in their READY status, each with its job.
	Ready []Product
	// Settlements are the finalize records.
	Settlements []Settlement
	// Ledger are the usage ledger's rows.
	Ledger []Billing
}

// Job is a row of the jobs table.
type Job struct {
	Status     string
	Generation int64
}

// Product is a row that only a COMPLETED job may leave: Table names it,
// ID is its key, JobID the job that wrote it; Generation is the attempt
// that wrote it, 0 when the table does not say.
type Product struct {
	Table, ID, JobID string
	Generation       int64
}

// Settlement is a finalize record: State is "pending", "confirmed" or
// "given_up".
type Settlement struct {
	JobID      string
	Generation int64
	State      string
}

// Billing is one usage row: the job, the attempt, the meter.
type Billing struct {
	JobID      string
	Generation int64
	Meter      string
}

// Queries are the statements that read the run's final state. Each
// returns the columns of its type, in order, ids as text.
type Queries struct {
	Jobs        string // id, status, generation
	Products    string // table, id, job_id, generation
	Ready       string // table, id, job_id, 0
	Settlements string // job_id, generation, state
	Ledger      string // job_id, generation, meter
}

// Querier is what Load reads with: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Load reads the history table and the final state.
func Load(ctx context.Context, db Querier, q Queries) ([]Event, State, error) {
	rows, err := db.Query(ctx, `SELECT seq, process, call, op, kind, job_id, generation, reason, detail, counts, at, tx_at
		FROM history ORDER BY seq`)
	if err != nil {
		return nil, State{}, fmt.Errorf("history: load: %w", err)
	}
	var events []Event
	var e Event
	var kind string
	var counts []byte
	if _, err := pgx.ForEachRow(rows, []any{&e.Seq, &e.Process, &e.Call, &e.Op, &kind, &e.JobID, &e.Generation,
		&e.Reason, &e.Detail, &counts, &e.At, &e.TxAt}, func() error {
		e.Kind, e.Counts = Kind(kind), nil
		if counts != nil {
			if err := json.Unmarshal(counts, &e.Counts); err != nil {
				return fmt.Errorf("event %d: counts: %w", e.Seq, err)
			}
		}
		events = append(events, e)
		return nil
	}); err != nil {
		return nil, State{}, fmt.Errorf("history: load: %w", err)
	}

	s := State{Jobs: map[string]Job{}}
	var id, str, table string
	var gen int64
	var j Job
	steps := []struct {
		sql  string
		dest []any
		add  func()
	}{
		{q.Jobs, []any{&id, &j.Status, &j.Generation}, func() { s.Jobs[id] = j }},
		{q.Products, []any{&table, &id, &str, &gen}, func() {
			s.Products = append(s.Products, Product{Table: table, ID: id, JobID: str, Generation: gen})
		}},
		{q.Ready, []any{&table, &id, &str, &gen}, func() {
			s.Ready = append(s.Ready, Product{Table: table, ID: id, JobID: str, Generation: gen})
		}},
		{q.Settlements, []any{&id, &gen, &str}, func() {
			s.Settlements = append(s.Settlements, Settlement{JobID: id, Generation: gen, State: str})
		}},
		{q.Ledger, []any{&id, &gen, &str}, func() { s.Ledger = append(s.Ledger, Billing{JobID: id, Generation: gen, Meter: str}) }},
	}
	for _, st := range steps {
		rows, err := db.Query(ctx, st.sql)
		if err != nil {
			return nil, State{}, fmt.Errorf("history: load state: %w", err)
		}
		if _, err := pgx.ForEachRow(rows, st.dest, func() error { st.add(); return nil }); err != nil {
			return nil, State{}, fmt.Errorf("history: load state: %w", err)
		}
	}
	return events, s, nil
}
