package jobguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard/marker"
	"go.opentelemetry.io/otel/metric"
)

// LookupPolicy says what the start guard does when it cannot read its
// evidence (Redis unreachable, a database error, an unreadable marker, a
// marker table that does not exist or may not be read).
type LookupPolicy int

const (
	// FailOpen lets the job through and logs a warning: the original design's
	// behaviour, and the default. The database reason is still checked inside
	// Start's conditional statement, so only the marker's evidence is lost.
	// In a caller's transaction a failed read of the marker table is rolled
	// back to a savepoint, so the transaction goes on.
	FailOpen LookupPolicy = iota
	// FailClosed refuses with an error wrapping ErrGuardUnavailable, which is
	// retryable: the queue tries again once the lookup works.
	FailClosed
)

func (p LookupPolicy) String() string {
	if p == FailClosed {
		return "fail-closed"
	}
	return "fail-open"
}

// StartGuardConfig configures a StartGuard.
// The failure reason it looks for and the markers' prefix are the guard's
// Shared settings, which the reclaimer writes with.
type StartGuardConfig struct {
	// OnLookupError is the policy when evidence cannot be read. Defaults to
	// FailOpen.
	OnLookupError LookupPolicy
	// Logger receives the fail-open warnings. Defaults to slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the start guard's metrics:
	// jobguard.start.refusals by source (database, marker) and
	// jobguard.start.lookup_errors by lookup and policy. Defaults to nil: no
	// metrics, at no cost.
	MeterProvider metric.MeterProvider
	// Owner is the worker process's lease (a *lease.Lease satisfies it):
	// Start writes its ID to the table's OwnerColumn in its one
	// conditional statement, so that the reclaimer can rescue the job
	// within the lease's bound should the process die, and refuses to
	// start anything once Err reports the lease ended (ErrOwnerLost,
	// before any write). Start the lease before the first Start: an
	// owner with no live lease is a dead one to the reclaimer. It needs
	// the mapping's OwnerColumn and GenerationColumn. Defaults to nil:
	// Start writes no owner (it clears the column where mapped).
	Owner Owner
}

// StartGuard refuses to start jobs that were reclaimed, and starts the rest
// as a new execution. Use one per process; it is safe for concurrent use.
type StartGuard struct {
	guard   *Guard
	markers *marker.RedisStore    // Shared.Markers = MarkersRedis
	table   *marker.PostgresStore // Shared.Markers = MarkersPostgres
	refused []string              // the failure reasons' beginnings Start refuses: reclaimed, cancelled
	policy  LookupPolicy
	log     *slog.Logger
	met     *startMetrics
	owner   Owner
}

// NewStartGuard returns a start guard over guard's table and the reclaim
// markers where guard's Shared.Markers says they are. With MarkersPostgres
// (the default) it needs the marker table (marker.Migration) on the
// search_path when guard was built, and no Redis: rdb may be nil, and is
// not used. With MarkersRedis it reads the markers in rdb, which must not
// be nil.
func NewStartGuard(guard *Guard, rdb marker.Redis, opts StartGuardConfig) (*StartGuard, error) {
	if guard == nil {
		return nil, errors.New("jobguard: start guard: guard is nil")
	}
	sg := &StartGuard{guard: guard}
	var err error
	switch guard.Shared().Markers {
	case MarkersRedis:
		if rdb == nil {
			return nil, errors.New("jobguard: start guard: Shared.Markers is MarkersRedis, but the Redis client is nil")
		}
		sg.markers, err = marker.NewRedisStore(guard, rdb, marker.Config{})
	default:
		sg.table, err = marker.NewPostgresStore(guard, marker.Config{})
	}
	if err != nil {
		return nil, fmt.Errorf("jobguard: start guard: %w", err)
	}
	if opts.OnLookupError != FailOpen && opts.OnLookupError != FailClosed {
		return nil, fmt.Errorf("jobguard: start guard: OnLookupError %d is not a LookupPolicy", opts.OnLookupError)
	}
	if opts.Owner != nil {
		if err := checkOwned(guard, opts.Owner); err != nil {
			return nil, fmt.Errorf("jobguard: start guard: Owner: %w", err)
		}
	}
	sg.owner = opts.Owner
	// The logger is the caller's code, called right after the state
	// changes it reports: its panic must not undo them.
	sg.refused = []string{guard.Shared().ReclaimedReason, guard.Shared().CancelledReason}
	sg.policy, sg.log = opts.OnLookupError, safe.Logger(opts.Logger)
	sg.met = newStartMetrics(opts.MeterProvider, opts.OnLookupError)
	return sg, nil
}

// Markers returns the Redis marker store the guard reads, or nil when its
// markers are in Postgres (see PostgresMarkers).
func (s *StartGuard) Markers() *marker.RedisStore { return s.markers }

// PostgresMarkers returns the marker table the guard reads, or nil when
// its markers are in Redis (see Markers).
func (s *StartGuard) PostgresMarkers() *marker.PostgresStore { return s.table }

// Marker returns jobID's marker from wherever the guard reads them; db is
// used when they are in Postgres. found is false when there is none.
func (s *StartGuard) Marker(ctx context.Context, db DB, jobID string) (m marker.Marker, found bool, err error) {
	if s.table != nil {
		return s.table.Read(ctx, db, jobID)
	}
	return s.markers.Read(ctx, jobID)
}

// Check is the original design's guard: it returns a *ReclaimedError
// wrapping ErrReclaimed when the job's failure reason says it was reclaimed,
// or when a reclaim marker exists for its current generation, and a
// *CancelledError wrapping ErrCancelled when the reason says an operator
// cancelled it (Guard.Cancel). It changes nothing; Start is Check and the
// start itself in one step.
func (s *StartGuard) Check(ctx context.Context, db DB, jobID string) error {
	return s.met.checked(ctx, s.check(ctx, db, jobID))
}

// check is Check without its metrics.
func (s *StartGuard) check(ctx context.Context, db DB, jobID string) error {
	id, err := s.guard.idArg(jobID)
	if err != nil {
		return fmt.Errorf("jobguard: check: %w", err)
	}
	jobID = canonicalID(id) // the marker is keyed by the canonical id
	r, found, dbErr := s.guard.inspect(ctx, db, id)
	if dbErr != nil {
		if err := s.lookupFailed(ctx, jobID, "database", dbErr); err != nil {
			return err
		}
	} else if !found {
		return &StateError{Op: OpCheck, JobID: jobID, Reason: ReasonNotFound, kind: ErrJobTerminal}
	} else if s.reclaimed(r.reason) {
		return &ReclaimedError{JobID: jobID, Source: "database", Reason: r.reason}
	} else if s.cancelled(r.reason) {
		return &CancelledError{JobID: jobID, Reason: r.reason}
	}
	var m marker.Marker
	var ok bool
	err = inSavepoint(ctx, db, func() (err error) {
		m, ok, err = s.Marker(ctx, db, jobID)
		return err
	})
	if err != nil {
		return s.lookupFailed(ctx, jobID, "marker", err)
	}
	// Without the row's generation (fail-open after a database error) the
	// marker is taken at its word.
	if ok && (dbErr != nil || s.markerApplies(m, r.generation)) {
		return &ReclaimedError{JobID: jobID, Source: "marker", Reason: m.Reason, Generation: m.Generation}
	}
	return nil
}

// Start checks the job like Check and starts it as a new execution: in one
// conditional statement it moves a QUEUED or PROCESSING job whose failure
// reason does not say reclaimed or cancelled (and, on a fenced table, whose
// generation is newer than any marker's) to PROCESSING, bumps the
// generation, stamps the start time, and returns the new Execution.
//
// It never moves a FAILED or COMPLETED job: those return a *StateError
// wrapping ErrJobTerminal, reclaimed jobs a *ReclaimedError wrapping
// ErrReclaimed, and cancelled jobs a *CancelledError wrapping ErrCancelled
// (the cancel is told before the status). All are permanent (see IsPermanent). Starting a job that is
// already PROCESSING (a redelivery after a crash) fences out the old
// execution.
//
// The Execution names the job as the id column prints it (a uuid in lower
// case), which is how the reclaimer's markers and notices name it too.
func (s *StartGuard) Start(ctx context.Context, db DB, jobID string) (Execution, error) {
	exec, err := s.start(ctx, db, jobID)
	return exec, s.met.checked(ctx, err)
}

// start is Start without its metrics.
func (s *StartGuard) start(ctx context.Context, db DB, jobID string) (Execution, error) {
	g := s.guard
	id, err := g.idArg(jobID)
	if err != nil {
		return Execution{}, fmt.Errorf("jobguard: start: %w", err)
	}
	jobID = canonicalID(id) // the marker is keyed by the canonical id
	if err := s.ownerLost(jobID); err != nil {
		return Execution{}, err
	}
	if s.table != nil {
		return s.startMarked(ctx, db, id, jobID)
	}
	m, marked, err := s.markers.Read(ctx, jobID)
	if err != nil {
		if err := s.lookupFailed(ctx, jobID, "marker", err); err != nil {
			return Execution{}, err
		}
	}
	return s.startUnmarked(ctx, db, id, jobID, m, marked)
}

// startUnmarked runs the start statement that reads no marker table, with
// the marker the caller read (marked false when there is none, or when its
// lookup failed).
func (s *StartGuard) startUnmarked(ctx context.Context, db DB, id any, jobID string, m marker.Marker, marked bool) (Execution, error) {
	g := s.guard
	args := []any{id, s.refused}
	if g.Fenced() {
		markerGen := int64(-1)
		if marked {
			markerGen = m.Generation
		}
		args = append(args, markerGen)
	} else if marked {
		return Execution{}, &ReclaimedError{JobID: jobID, Source: "marker", Reason: m.Reason}
	}
	if g.table.OwnerColumn != "" {
		args = append(args, s.ownerID())
	}

	var gen int64
	err := db.QueryRow(ctx, g.sql.start, args...).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return Execution{}, s.startRefusal(ctx, db, id, jobID, m, marked)
	}
	if err != nil {
		return Execution{}, fmt.Errorf("jobguard: start: %w", err)
	}
	return Execution{JobID: jobID, Generation: gen}, nil
}

// startMarked is start over markers in Postgres: one statement reads the
// marker and starts the job. The marker is read again only to explain a
// refusal. A marker table that cannot be read (dropped, or no privilege
// on it) is a failed lookup: under FailOpen the job is started by the
// statement that reads no marker, which a savepoint makes possible inside
// the caller's transaction.
func (s *StartGuard) startMarked(ctx context.Context, db DB, id any, jobID string) (Execution, error) {
	var gen int64
	err := inSavepoint(ctx, db, func() error {
		args := []any{id, s.refused, s.guard.TableKey(), jobID}
		if s.guard.table.OwnerColumn != "" {
			args = append(args, s.ownerID())
		}
		return db.QueryRow(ctx, s.guard.sql.startMarked, args...).Scan(&gen)
	})
	if unreadable(err) {
		if err := s.lookupFailed(ctx, jobID, "marker", err); err != nil {
			return Execution{}, err
		}
		return s.startUnmarked(ctx, db, id, jobID, marker.Marker{}, false)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		m, marked, err := s.table.Read(ctx, db, jobID)
		if err != nil {
			return Execution{}, fmt.Errorf("jobguard: start: job %s was not started (reading its marker to explain: %w)", jobID, err)
		}
		return Execution{}, s.startRefusal(ctx, db, id, jobID, m, marked)
	}
	if err != nil {
		return Execution{}, fmt.Errorf("jobguard: start: %w", err)
	}
	return Execution{JobID: jobID, Generation: gen}, nil
}

// startRefusal explains a Start that matched no row: the reclaim evidence
// first, then what whyRefused finds of the row.
func (s *StartGuard) startRefusal(ctx context.Context, db DB, id any, jobID string, m marker.Marker, marked bool) error {
	r, found, err := s.guard.inspect(ctx, db, id)
	switch {
	case err != nil:
		return fmt.Errorf("jobguard: start: job %s was not started (reading it to explain: %w)", jobID, err)
	case found && s.reclaimed(r.reason):
		return &ReclaimedError{JobID: jobID, Source: "database", Reason: r.reason}
	case found && s.cancelled(r.reason):
		return &CancelledError{JobID: jobID, Reason: r.reason}
	case found && marked && s.markerApplies(m, r.generation):
		return &ReclaimedError{JobID: jobID, Source: "marker", Reason: m.Reason, Generation: m.Generation}
	}
	return whyRefused(s.guard.sql.started, jobID, 0, ErrJobTerminal, r, found, nil)
}

// reclaimed reports whether a failure reason says the job was reclaimed.
func (s *StartGuard) reclaimed(reason string) bool { return s.guard.shared.Reclaimed(reason) }

// cancelled reports whether a failure reason says an operator cancelled
// the job.
func (s *StartGuard) cancelled(reason string) bool { return s.guard.shared.Cancelled(reason) }

// markerApplies reports whether a marker still speaks for the job: it was
// written for the job's current generation (or a later one). A Retry bumps
// the generation past it. Without a generation column every marker applies.
func (s *StartGuard) markerApplies(m marker.Marker, rowGeneration int64) bool {
	return !s.guard.Fenced() || m.Generation >= rowGeneration
}

// unreadable reports whether err is the server's refusal to read a table:
// it does not exist (SQLSTATE 42P01) or may not be read (42501).
func unreadable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42501")
}

// inSavepoint runs fn, a statement or two on db, so that its failure
// leaves a transaction db is in usable: inside a savepoint, rolled back
// to when fn fails. Outside a transaction it runs fn as it is.
func inSavepoint(ctx context.Context, db DB, fn func() error) error {
	if txstate.Of(db) == txstate.Own {
		return fn()
	}
	if _, err := db.Exec(ctx, "SAVEPOINT jobguard_lookup"); err != nil {
		return err
	}
	err := fn()
	if err != nil {
		if _, rerr := db.Exec(ctx, "ROLLBACK TO SAVEPOINT jobguard_lookup"); rerr != nil {
			return errors.Join(err, rerr)
		}
	}
	if _, rerr := db.Exec(ctx, "RELEASE SAVEPOINT jobguard_lookup"); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// lookupFailed applies the lookup policy: nil (after a warning) to let the
// job through, or the refusal.
func (s *StartGuard) lookupFailed(ctx context.Context, jobID, lookup string, err error) error {
	s.met.lookupFailed(ctx, lookup)
	if s.policy == FailClosed {
		return fmt.Errorf("%w: job %s: %s lookup: %w", ErrGuardUnavailable, jobID, lookup, err)
	}
	s.log.WarnContext(ctx, "jobguard: start guard lookup failed; letting the job through",
		slog.String("job_id", jobID), slog.String("lookup", lookup),
		slog.String("policy", s.policy.String()), slog.Any("error", err))
	return nil
}
