package lease

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/sqlfile"
)

// WorkersTableDefault is the table of worker processes, created by
// Migration.
const WorkersTableDefault = "jobguard_workers"

//go:embed migrations/*.sql
var embedded embed.FS

// MigrationFiles holds the SQL files that create the default workers table
// (id, host, pid, started_at, renewed_at, expires_at) and its index, named
// in the order they apply. Each can be run more than once, so any
// migration tool can take them.
//
// Migration is the SQL of every file in MigrationFiles, in order, as one string.
var MigrationFiles, Migration = sqlfile.Load(embedded, "migrations")

// DB is what the lease and the questions about leases need of a database:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = (pgx.Tx)(nil)
)

// Workers names the table of worker processes, and asks it the questions
// a reclaimer asks: is this owner's lease live, which of these owners are
// dead. The zero value is WorkersTableDefault resolved through the
// connection's search_path.
type Workers struct {
	// Schema holds the table. Defaults to "", which resolves it through
	// the connection's search_path.
	Schema string
	// Table is the table's name. Defaults to WorkersTableDefault.
	Table string
}

// quoted checks the names and returns the table's quoted name.
func (w Workers) quoted() (string, error) {
	if w.Table == "" {
		w.Table = WorkersTableDefault
	}
	return ident.QuoteTable(w.Schema, w.Table)
}

// liveAlias names the workers table inside Live's subquery: a name no
// caller's own alias is likely to take, as the owner expression is
// resolved against the subquery first.
const liveAlias = "jobguard_lease_w"

// Live returns the SQL predicate "the lease of the worker named by owner
// is live": true while a row of the workers table has that id and an
// expires_at after now(), the database's clock at the start of the
// statement's transaction. owner is an SQL expression spliced as written
// (a quoted column such as j."owner_id", or a $n parameter) and compared
// as text, so that the probe is one primary-key lookup.
//
// An owner with no row (never registered, pruned), a lease that expired
// and a lease released on a clean shutdown are all not live. So is a NULL
// owner: a job that no process claims must be told apart with its own
// "owner IS NOT NULL" when that matters.
//
// Inside a long transaction now() is the transaction's start, so the
// predicate judges at that time: it can find a lease live that has since
// expired, never the other way round.
func (w Workers) Live(owner string) (string, error) {
	name, err := w.quoted()
	if err != nil {
		return "", fmt.Errorf("lease: workers: %w", err)
	}
	if strings.TrimSpace(owner) == "" {
		return "", errors.New("lease: workers: the owner expression is empty")
	}
	return `EXISTS (SELECT 1 FROM ` + name + ` AS ` + liveAlias +
		` WHERE ` + liveAlias + `.id = (` + owner + `)::text AND ` + liveAlias + `.expires_at > now())`, nil
}

// DeadLocked returns the SQL predicate "the lease of the worker named by
// owner is not live, and stays so until the statement's transaction
// ends", for a statement that acts on the answer (a rescue): the owner has
// no row, or its row expired by now() and is locked FOR SHARE. A row that
// another transaction holds (a renewal; also a release or a Prune, for
// as long as their statement's transaction lasts) is skipped, and the
// lease taken for live: a rescue is delayed to a later sweep, never made
// twice. A renewal that comes after the lock waits for it, then finds the
// lease expired and is refused. Live alone cannot promise this: a renewal that began
// before the expiry and commits after a reader's snapshot would revive a
// lease the reader judged dead.
func (w Workers) DeadLocked(owner string) (string, error) {
	name, err := w.quoted()
	if err != nil {
		return "", fmt.Errorf("lease: workers: %w", err)
	}
	if strings.TrimSpace(owner) == "" {
		return "", errors.New("lease: workers: the owner expression is empty")
	}
	match := liveAlias + `.id = (` + owner + `)::text`
	return `(NOT EXISTS (SELECT 1 FROM ` + name + ` AS ` + liveAlias + ` WHERE ` + match + `)` +
		` OR EXISTS (SELECT 1 FROM ` + name + ` AS ` + liveAlias + ` WHERE ` + match +
		` AND ` + liveAlias + `.expires_at <= now() FOR SHARE OF ` + liveAlias + ` SKIP LOCKED))`, nil
}

// Dead returns the ids among ids whose lease is not live on the
// database's clock (Live's rule, in one statement), in the order given.
// An id with no row is dead.
//
// The bound: a process that stops renewing (killed, stopped, cut off from
// the database) is dead to Dead within its lease's TTL of the last renewal
// the database executed, once no transaction holds its row: a row that a
// renewal, a release or a Prune is writing is taken for live until that
// transaction ends (DeadLocked). A process that is live by this answer may
// die a moment later; one that is dead stays dead, as a lease is never
// renewed after it expired. Dead locks the rows it reports (FOR SHARE), so
// it cannot run in a read-only transaction or on a standby.
func (w Workers) Dead(ctx context.Context, db DB, ids []string) ([]string, error) {
	// DeadLocked, not NOT Live: a renewal under way (written, not yet
	// committed) would revive a lease Live's snapshot found expired.
	expired, err := w.DeadLocked("u.id")
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT u.id FROM unnest($1::text[]) WITH ORDINALITY AS u(id, n) WHERE `+
		expired+` ORDER BY u.n`, ids)
	if err != nil {
		return nil, fmt.Errorf("lease: dead: %w", err)
	}
	dead, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("lease: dead: %w", err)
	}
	return dead, nil
}

// Prune deletes the rows of leases that ended more than age ago, and
// returns how many. A pruned owner reads as dead, as it did before, so
// pruning never revives one; keep age longer than the longest time a
// reclaimer may still be acting on an owner's jobs. A negative age is
// refused.
func (w Workers) Prune(ctx context.Context, db DB, age time.Duration) (int64, error) {
	if err := interval.Check("age", age); err != nil {
		return 0, fmt.Errorf("lease: prune: %w", err)
	}
	name, err := w.quoted()
	if err != nil {
		return 0, fmt.Errorf("lease: prune: %w", err)
	}
	tag, err := db.Exec(ctx, `DELETE FROM `+name+` WHERE expires_at < now() - `+interval.Param("$1"), interval.Micros(age))
	if err != nil {
		return 0, fmt.Errorf("lease: prune: %w", err)
	}
	return tag.RowsAffected(), nil
}
