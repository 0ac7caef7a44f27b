package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/safe"
)

// TTLDefault is the default of Config.TTL: the longest a dead process's
// jobs wait, beside a job type's runtime limit of minutes or hours, and
// long enough that a garbage-collection pause or a slow round trip does
// not lose a live process its lease.
const TTLDefault = 30 * time.Second

// RenewDivisorDefault sets the default of Config.Renew: TTL divided by it,
// so that a lease survives two failed renewals in a row.
const RenewDivisorDefault = 3

// Errors that say why a lease is no longer held; Err returns one of them,
// and Start returns ErrTaken or ErrStopped.
var (
	// ErrLost: the database refused a renewal, as the lease had expired on
	// its clock (the process was stopped, or cut off, for longer than the
	// TTL), or the row was removed.
	ErrLost = errors.New("lease: lost: the database refused the renewal of an expired lease")
	// ErrExpired: no renewal succeeded within the TTL of the last one, on
	// the process's own measure; the database may have let the lease
	// expire. The lease is given up and not renewed again.
	ErrExpired = errors.New("lease: expired: no renewal succeeded within the TTL")
	// ErrReleased: Stop released the lease.
	ErrReleased = errors.New("lease: released")
	// ErrTaken: Start found a row with the lease's ID: a lease ID names
	// one process start, and is never taken over, so that the jobs of a
	// dead process cannot look alive again.
	ErrTaken = errors.New("lease: the ID is already taken")
	// ErrStopped: Start after Stop. A lease is one process start; make a
	// new one.
	ErrStopped = errors.New("lease: stopped")
)

// Config tunes a Lease.
type Config struct {
	// TTL is how long a lease lives past its last renewal, on the
	// database's clock: the bound within which the process's death is
	// seen. Defaults to TTLDefault.
	TTL time.Duration
	// Renew is how often the lease is renewed; a renewal that fails is
	// retried sooner (every Renew/4) until one succeeds or the TTL runs
	// out. It must be shorter than TTL. Defaults to TTL/RenewDivisorDefault.
	Renew time.Duration
	// Timeout bounds each statement of the lease (acquire, renew,
	// release); a renewal is bounded by the time its lease has left, too.
	// It must be shorter than TTL. Defaults to Renew.
	Timeout time.Duration
	// ID names this process start in the workers table, and is what a
	// job's owner column will hold. It must be unique per process start
	// and never reused: Start refuses an ID whose row exists (ErrTaken).
	// Defaults to a random UUID; the host and pid are recorded beside it.
	ID string
	// Workers is the table of worker processes. Defaults to
	// WorkersTableDefault through search_path.
	Workers Workers
	// Logger receives the failed renewals (warn) and the loss (error).
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the process's clock, used only to measure how long ago its
	// last renewal was sent; no time of the process ever reaches the
	// database. It must advance as time does (time.Now's monotonic
	// reading does, whatever the wall clock says). Defaults to time.Now.
	Now func() time.Time
}

// Lease is one worker process's lease. Create it with New, take it with
// Start, give it up with Stop; Lost says when it ended otherwise.
type Lease struct {
	db      DB
	cfg     Config
	log     *slog.Logger
	host    string
	pid     int
	acquire string
	renew   string
	release string

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the renewer has returned

	lostOnce sync.Once
	lost     chan struct{}
	errMu    sync.Mutex
	err      error
}

// New checks cfg and builds the lease's statements. It does no I/O.
// Errors name the field at fault.
func New(db DB, cfg Config) (*Lease, error) {
	if db == nil {
		return nil, errors.New("lease: new: DB is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("lease: new: %w", err)
	}
	name, err := cfg.Workers.quoted()
	if err != nil {
		return nil, fmt.Errorf("lease: new: Workers: %w", err)
	}
	host, _ := os.Hostname() // a label for operators; unknown is ""
	// The database's clock stamps every time; the TTL travels as whole
	// microseconds ($2 or $4), rounded up, and becomes an interval exactly.
	return &Lease{db: db, cfg: cfg, log: safe.Logger(cfg.Logger), host: host, pid: os.Getpid(),
		// $1 id, $2 host, $3 pid, $4 TTL in microseconds.
		acquire: `INSERT INTO ` + name + ` (id, host, pid, started_at, renewed_at, expires_at)` +
			` VALUES ($1, $2, $3, now(), now(), now() + ` + interval.Param("$4") + `)`,
		// $1 id, $2 TTL in microseconds. A lease that expired stays
		// expired: the renewal of one is refused, not granted. The
		// expiry is compared with the clock as the row is written, not
		// as the statement began: a renewal that waited for a rescue
		// holding the row (Workers.DeadLocked) finds it expired.
		renew: `UPDATE ` + name + ` SET renewed_at = now(), expires_at = now() + ` + interval.Param("$2") +
			` WHERE id = $1 AND expires_at > clock_timestamp()`,
		// $1 id. Never later than it was: a released lease is dead at once.
		release: `UPDATE ` + name + ` SET expires_at = least(expires_at, now()) WHERE id = $1`,
		lost:    make(chan struct{}),
	}, nil
}

func (c Config) withDefaults() (Config, error) {
	for _, d := range []struct {
		field string
		value time.Duration
	}{{"TTL", c.TTL}, {"Renew", c.Renew}, {"Timeout", c.Timeout}} {
		if err := interval.Check(d.field, d.value); err != nil {
			return c, err
		}
	}
	if c.TTL == 0 {
		c.TTL = TTLDefault
	}
	if c.TTL < time.Millisecond {
		return c, fmt.Errorf("TTL %v is shorter than a millisecond", c.TTL)
	}
	if c.Renew == 0 {
		c.Renew = c.TTL / RenewDivisorDefault
	}
	if c.Renew >= c.TTL {
		return c, fmt.Errorf("Renew %v is not shorter than TTL %v: the lease would lapse between renewals", c.Renew, c.TTL)
	}
	if c.Timeout == 0 {
		c.Timeout = c.Renew
	}
	if c.Timeout >= c.TTL {
		return c, fmt.Errorf("Timeout %v is not shorter than TTL %v: one slow renewal would outlive the lease", c.Timeout, c.TTL)
	}
	switch {
	case c.ID == "":
		c.ID = uuid.NewString()
	case strings.IndexByte(c.ID, 0) >= 0:
		return c, fmt.Errorf("ID %q contains a NUL byte", c.ID)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// ID is the lease's id: the value a job's owner column holds while this
// process runs it.
func (l *Lease) ID() string { return l.cfg.ID }

// TTL is the lease's time to live past its last renewal.
func (l *Lease) TTL() time.Duration { return l.cfg.TTL }

// Start takes the lease: one INSERT, bounded by ctx and Timeout, whose
// expiry is the database's now() plus TTL. It then renews the lease in a
// goroutine of its own until Stop, or until the lease is lost. It returns
// ErrTaken when the ID has a row, ErrStopped after Stop, and nil (doing
// nothing) when the lease was started already.
//
// The renewer outlives ctx's cancellation (it keeps ctx's values only):
// Stop ends it.
func (l *Lease) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.stopped:
		return ErrStopped
	case l.started:
		return nil
	}
	sent := l.cfg.Now()
	actx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	_, err := l.db.Exec(actx, l.acquire, l.cfg.ID, l.host, l.pid, interval.Micros(l.cfg.TTL))
	cancel()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		return fmt.Errorf("lease: start %s: %w", l.cfg.ID, ErrTaken)
	case err != nil:
		return fmt.Errorf("lease: start %s: %w", l.cfg.ID, err)
	}
	l.started = true
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = stop
	l.done = make(chan struct{})
	go l.run(rctx, sent.Add(l.cfg.TTL))
	return nil
}

// Stop ends the renewer, waits for it, and releases the lease: its
// expires_at becomes the database's now(), so that its jobs are seen dead
// at once. The release is bounded by ctx and Timeout; its error is
// returned, and the lease then expires on its own within TTL. Lost is
// closed (ErrReleased, unless the lease was lost before). Stop is safe to
// call more than once, and before Start.
func (l *Lease) Stop(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return nil
	}
	l.stopped = true
	if !l.started {
		l.lose(ErrReleased)
		return nil
	}
	l.cancel()
	<-l.done
	l.lose(ErrReleased)
	if err := l.releaseOnce(ctx); err != nil {
		return fmt.Errorf("lease: stop %s: %w", l.cfg.ID, err)
	}
	return nil
}

// Lost is closed when the lease is no longer held: lost (ErrLost),
// expired on the process's own measure (ErrExpired) or released by Stop
// (ErrReleased); Err says which. A worker stops the executions it runs
// under the lease when it is closed: the reclaimer may already have
// handed their jobs to another process.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns nil while the lease is held (or not yet started), and why
// it ended once Lost is closed.
func (l *Lease) Err() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err
}

// lose records why the lease ended, once, and closes Lost.
func (l *Lease) lose(err error) {
	l.lostOnce.Do(func() {
		l.errMu.Lock()
		l.err = err
		l.errMu.Unlock()
		close(l.lost)
	})
}

// run renews the lease until ctx ends or the lease is lost. deadline is
// when the lease may end on the database's clock, on the process's own
// measure: the send time of the last renewal that succeeded plus TTL. The
// database stamped that renewal no earlier than it was sent, so its
// expiry is no earlier than deadline.
func (l *Lease) run(ctx context.Context, deadline time.Time) {
	defer close(l.done)
	wait := l.cfg.Renew
	for {
		left := deadline.Sub(l.cfg.Now())
		if left <= 0 {
			l.expired(ctx)
			return
		}
		timer := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		sent := l.cfg.Now()
		left = deadline.Sub(sent)
		if left <= 0 {
			l.expired(ctx)
			return
		}
		renewed, err := l.renewOnce(ctx, min(l.cfg.Timeout, left))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			wait = max(l.cfg.Renew/4, time.Millisecond)
			l.log.WarnContext(ctx, "lease: renewal failed; retrying within the lease",
				slog.String("lease_id", l.cfg.ID), slog.Duration("lease_left", left), slog.Any("error", err))
		case !renewed:
			l.lose(ErrLost)
			l.log.ErrorContext(ctx, "lease: lost: the database refused the renewal of an expired lease",
				slog.String("lease_id", l.cfg.ID))
			return
		default:
			deadline = sent.Add(l.cfg.TTL)
			wait = l.cfg.Renew
		}
	}
}

// expired gives the lease up after no renewal succeeded within the TTL:
// Lost first, so that the worker stops, then a release, retried every
// Renew until it succeeds or Stop: a release that lands ends the lease at
// once on the database's clock, should it still be live there.
func (l *Lease) expired(ctx context.Context) {
	l.lose(ErrExpired)
	l.log.ErrorContext(ctx, "lease: expired: no renewal succeeded within the TTL; giving the lease up",
		slog.String("lease_id", l.cfg.ID), slog.Duration("ttl", l.cfg.TTL))
	for {
		if err := l.releaseOnce(ctx); err == nil || ctx.Err() != nil {
			return
		}
		timer := time.NewTimer(l.cfg.Renew)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// renewOnce runs the renewal, bounded by timeout; renewed is false when
// the database refused it.
func (l *Lease) renewOnce(ctx context.Context, timeout time.Duration) (renewed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tag, err := l.db.Exec(ctx, l.renew, l.cfg.ID, interval.Micros(l.cfg.TTL))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// releaseOnce runs the release, bounded by Timeout.
func (l *Lease) releaseOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	_, err := l.db.Exec(ctx, l.release, l.cfg.ID)
	return err
}
