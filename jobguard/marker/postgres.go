package marker

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/internal/sqlfile"
)

// TableName is the table of reclaim markers that Migration creates. A
// guard looks for it on the search_path when it is built.
const TableName = "job_reclaim_markers"

//go:embed migrations/*.sql
var embedded embed.FS

// MigrationFiles holds the SQL files that create the table of reclaim
// markers (TableName), named in the order they apply. Each file is
// plain SQL that can be run more than once. They create no jobs table, so
// they apply beside a table of your own as well as beside jobguard.Migration's.
//
// Migration is the SQL of every file in MigrationFiles, in
// order, as one string.
var MigrationFiles, Migration = sqlfile.Load(embedded, "migrations")

// DB is what a PostgresStore needs of a database handle: *pgxpool.Pool,
// *pgx.Conn, pgx.Tx and jobguard.DB all satisfy it. Pass the reclaim's
// transaction to commit a marker with its reclaim.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PostgresStore reads and writes reclaim markers in the table Migration
// creates, for jobguard's Shared.Markers = MarkersPostgres. A row is
// keyed by the job's canonical id (Jobs.CanonicalID), whatever spelling a
// call is given, and its jobs table's Jobs.TableKey, so that several jobs
// tables share the table. Every time it holds is the database's: a marker
// is stamped and expires on the database's clock, and reads ignore a
// marker past its expiry. Expired rows stay until something deletes them
// (see the migration).
//
// Its methods take the DB to work on: the reclaimer passes its
// transaction, so that a marker commits with its reclaim, or not at all.
type PostgresStore struct {
	jobs  Jobs
	table string // quoted, as MarkerPlace names it
	ttl   int64  // microseconds
	sql   struct {
		write string // $1 table key, $2 ids, $3 generations, $4 reasons, $5 TTL in µs
		read  string // $1 table key, $2 id → generation, reason, reclaimed_at
		del   string // $1 table key, $2 id
		// alongside is write reading u(id, generation), the rows a
		// reclaim's statement failed, its parameters from first: the table
		// key, the reason, the TTL in µs.
		alongside func(first int) string
	}
}

func init() {
	guardlink.MarkersAlongside = func(store any, reason string) (guardlink.Alongside, string) {
		s := store.(*PostgresStore)
		key := s.jobs.TableKey()
		return guardlink.Alongside{SQL: s.sql.alongside, Args: []any{key, reason, s.ttl}}, key
	}
}

// NewPostgresStore returns a store of the markers of jobs (a
// *jobguard.Guard) in the marker table, which must have been on the
// search_path when the guard was built (jobs.MarkerPlace names it).
func NewPostgresStore(jobs Jobs, cfg Config) (*PostgresStore, error) {
	if isNil(jobs) {
		return nil, errors.New("jobguard: marker table: jobs is nil")
	}
	tbl := jobs.MarkerPlace().Table
	if tbl == "" {
		return nil, fmt.Errorf("jobguard: marker table: %s does not exist in search_path when the guard was built"+
			" (apply marker.Migration first, or set Shared.Markers to MarkersRedis)", TableName)
	}
	ttl, err := ttlOf(cfg)
	if err != nil {
		return nil, fmt.Errorf("jobguard: marker table: %w", err)
	}
	s := &PostgresStore{jobs: jobs, table: tbl, ttl: interval.Micros(ttl)}
	// A marker of a lower generation changes nothing while the one it
	// meets is live: two reclaimers writing out of order must not move a
	// marker backwards. An expired marker says nothing, and is replaced.
	// Rows are written in the order of their ids, so that two writers of
	// overlapping batches lock them in one order and never deadlock.
	insert := `INSERT INTO ` + tbl + ` AS m (jobs_table, job_id, generation, reason, reclaimed_at, expires_at)`
	const conflict = ` ON CONFLICT (jobs_table, job_id) DO UPDATE SET generation = excluded.generation, reason = excluded.reason,` +
		` reclaimed_at = excluded.reclaimed_at, expires_at = excluded.expires_at` +
		` WHERE m.generation <= excluded.generation OR m.expires_at <= statement_timestamp()`
	s.sql.write = insert +
		` SELECT $1, u.job_id, u.generation, u.reason, statement_timestamp(), statement_timestamp() + ` + interval.Param("$5") +
		` FROM unnest($2::text[], $3::int8[], $4::text[]) AS u(job_id, generation, reason) ORDER BY u.job_id` + conflict
	// In a reclaim's statement the job is named as its id column prints
	// it, which is its canonical id, and the generation is the one the
	// statement failed. The rows are ordered as write orders them, in the
	// database's collation rather than the id column's own, so that the
	// two lock shared markers in one order.
	s.sql.alongside = func(first int) string {
		p := func(i int) string { return fmt.Sprintf("$%d", first+i) }
		return insert + ` SELECT ` + p(0) + `::text, u.id::text, u.generation, ` + p(1) + `::text, statement_timestamp(), statement_timestamp() + ` +
			interval.Param(p(2)) + ` FROM u ORDER BY u.id::text COLLATE "default"` + conflict
	}
	s.sql.read = fmt.Sprintf(`SELECT generation, reason, reclaimed_at FROM %s`+
		` WHERE jobs_table = $1 AND job_id = $2 AND expires_at > statement_timestamp()`, tbl)
	s.sql.del = fmt.Sprintf(`DELETE FROM %s WHERE jobs_table = $1 AND job_id = $2`, tbl)
	return s, nil
}

// Write stores the markers in one statement on db, each expiring the
// store's TTL after the statement's time on the database's clock, which is
// also the time it records (a Marker's At is not sent). A live marker of a
// higher generation is kept. A marker whose id the column cannot hold, or
// whose generation is negative, is refused before anything is sent: the
// error wraps ErrInvalidJobID or names the generation, and nothing is
// written, so a transaction db belongs to is left usable.
func (s *PostgresStore) Write(ctx context.Context, db DB, markers ...Marker) error {
	if len(markers) == 0 {
		return nil
	}
	at := make(map[string]int, len(markers)) // canonical id → index in ids
	ids := make([]string, 0, len(markers))
	gens := make([]int64, 0, len(markers))
	reasons := make([]string, 0, len(markers))
	var refused []error
	for _, m := range markers {
		id, err := s.jobs.CanonicalID(m.JobID)
		switch {
		case err != nil:
			refused = append(refused, fmt.Errorf("job %s: %w", m.JobID, err))
			continue
		case m.Generation < 0:
			refused = append(refused, fmt.Errorf("job %s: generation %d is negative", id, m.Generation))
			continue
		}
		// One statement cannot write a row twice: two spellings of one
		// job keep the higher generation, as two writes would.
		if i, ok := at[id]; ok {
			if m.Generation >= gens[i] {
				gens[i], reasons[i] = m.Generation, m.Reason
			}
			continue
		}
		at[id] = len(ids)
		ids, gens, reasons = append(ids, id), append(gens, m.Generation), append(reasons, m.Reason)
	}
	if len(refused) > 0 {
		return fmt.Errorf("jobguard: write markers: %w", errors.Join(refused...))
	}
	// The arrays travel as literals, one string each (see pgarray.Texts).
	if _, err := db.Exec(ctx, s.sql.write, s.jobs.TableKey(), pgarray.Texts(ids), pgarray.Ints(gens), pgarray.Texts(reasons), s.ttl); err != nil {
		return fmt.Errorf("jobguard: write markers: %w", err)
	}
	return nil
}

// Read returns jobID's live marker, under its canonical id; found is false
// when there is none, or it has expired. An id the column cannot hold
// returns an error wrapping ErrInvalidJobID.
func (s *PostgresStore) Read(ctx context.Context, db DB, jobID string) (m Marker, found bool, err error) {
	id, err := s.jobs.CanonicalID(jobID)
	if err != nil {
		return Marker{}, false, fmt.Errorf("jobguard: read marker: %w", err)
	}
	err = db.QueryRow(ctx, s.sql.read, s.jobs.TableKey(), id).Scan(&m.Generation, &m.Reason, &m.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return Marker{}, false, nil
	}
	if err != nil {
		return Marker{}, false, fmt.Errorf("jobguard: read marker of job %s: %w", id, err)
	}
	m.JobID = id
	return m, true, nil
}

// Delete removes jobID's marker. An id the column cannot hold returns an
// error wrapping ErrInvalidJobID.
func (s *PostgresStore) Delete(ctx context.Context, db DB, jobID string) error {
	id, err := s.jobs.CanonicalID(jobID)
	if err != nil {
		return fmt.Errorf("jobguard: delete marker: %w", err)
	}
	if _, err := db.Exec(ctx, s.sql.del, s.jobs.TableKey(), id); err != nil {
		return fmt.Errorf("jobguard: delete marker of job %s: %w", id, err)
	}
	return nil
}
