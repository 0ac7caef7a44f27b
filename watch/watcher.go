package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/jobguard"
)

// Watcher defaults.
const (
	// CheckIntervalDefault bounds how long a reclaim whose notice was lost
	// goes unnoticed.
	CheckIntervalDefault = 30 * time.Second
	// PingIntervalDefault is how long a subscription may stay silent before
	// the server is pinged.
	PingIntervalDefault = 30 * time.Second
	// ReconnectMinDefault is the first wait before resubscribing.
	ReconnectMinDefault = 250 * time.Millisecond
	// ReconnectMaxDefault caps the doubling wait between attempts.
	ReconnectMaxDefault = 30 * time.Second
)

// Config configures a Watcher.
type Config struct {
	// Guard reads the watched rows for the periodic check, says whether the
	// table is fenced by generations, and names the channel and the
	// reclaimed failure reason (its Shared settings). Required.
	Guard *jobguard.Guard
	// DB is where the periodic check reads, such as a *pgxpool.Pool.
	// Required.
	DB jobguard.DB
	// Transport is how notices arrive; it must match the publishers'.
	// Required.
	Transport Transport
	// CheckInterval is the time between two checks of every watched
	// execution against its row (one query for all of them). It bounds how
	// long a reclaim goes unnoticed when its notice is lost. Defaults to
	// CheckIntervalDefault (30s).
	CheckInterval time.Duration
	// PingInterval is how long the subscription may stay silent before the
	// watcher pings the server; a ping unanswered for another interval ends
	// the session and the watcher resubscribes. Defaults to
	// PingIntervalDefault (30s).
	PingInterval time.Duration
	// ReconnectMin is the wait before the first attempt to resubscribe after
	// the subscription failed; each failed attempt doubles it (with jitter)
	// up to ReconnectMax. Defaults to ReconnectMinDefault (250ms).
	ReconnectMin time.Duration
	// ReconnectMax caps the wait between attempts to resubscribe. Defaults
	// to ReconnectMaxDefault (30s).
	ReconnectMax time.Duration
	// Logger receives a line for every cancelled execution (info), a lost
	// and a restored subscription (warn, info) and a failed check (warn).
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock, used to measure outages. Defaults to time.Now.
	Now func() time.Time
}

// Watcher cancels the contexts of executions that lost their job. Create
// one per process with New, start Run once, and run each execution under
// the context Watch returns. It is safe for concurrent use.
type Watcher struct {
	cfg   Config
	log   *slog.Logger
	lis   listener
	rules rules
	table string // the guard's TableKey: the notices of other tables are not the watcher's

	mu   sync.Mutex
	jobs map[string]map[*entry]struct{} // job id → its watched executions

	checkNow chan struct{}
	running  atomic.Bool
	up       atomic.Bool   // subscribed right now
	ready    chan struct{} // closed at the first subscription
	readyOne sync.Once
	checks   atomic.Int64 // checks run by Run, for tests
}

// entry is one watched execution.
type entry struct {
	exec   jobguard.Execution
	key    string // exec.JobID, as the id column prints it
	cancel context.CancelCauseFunc
}

// New validates cfg and returns a Watcher. Nothing runs until Run.
func New(cfg Config) (*Watcher, error) {
	if cfg.Guard == nil {
		return nil, errors.New("watch: new: Guard is nil")
	}
	if cfg.DB == nil {
		return nil, errors.New("watch: new: DB is nil")
	}
	channel, err := cfg.Transport.channel(cfg.Guard)
	if err != nil {
		return nil, fmt.Errorf("watch: new: %w", err)
	}
	for _, d := range []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{
		{"CheckInterval", &cfg.CheckInterval, CheckIntervalDefault},
		{"PingInterval", &cfg.PingInterval, PingIntervalDefault},
		{"ReconnectMin", &cfg.ReconnectMin, ReconnectMinDefault},
		{"ReconnectMax", &cfg.ReconnectMax, ReconnectMaxDefault},
	} {
		if err := interval.Check(d.field, *d.v); err != nil {
			return nil, fmt.Errorf("watch: new: %w", err)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.ReconnectMax < cfg.ReconnectMin {
		return nil, fmt.Errorf("watch: new: ReconnectMax %v is below ReconnectMin %v", cfg.ReconnectMax, cfg.ReconnectMin)
	}
	// The logger is the caller's code, called right after the state
	// changes it reports: its panic must not undo them.
	cfg.Logger = safe.Logger(cfg.Logger)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	w := &Watcher{
		cfg:      cfg,
		log:      cfg.Logger,
		rules:    rules{fenced: cfg.Guard.Fenced(), statuses: cfg.Guard.Table().Statuses, shared: cfg.Guard.Shared()},
		table:    cfg.Guard.TableKey(),
		jobs:     make(map[string]map[*entry]struct{}),
		checkNow: make(chan struct{}, 1),
		ready:    make(chan struct{}),
	}
	if t := cfg.Transport; t.Redis != nil {
		w.lis = redisListener{rdb: t.Redis, channel: channel, ping: cfg.PingInterval}
	} else {
		w.lis = postgresListener{pool: t.Postgres, channel: channel, ping: cfg.PingInterval}
	}
	return w, nil
}

// Watch returns a context derived from ctx that the watcher cancels, with a
// *LostError as its cause, once exec has lost its job. Call it right
// after jobguard's Start has returned exec (its write committed), and run the
// execution's external calls under the returned context.
//
// Executions are kept under the job id as the id column prints it (a uuid
// in lower case; see jobguard.Guard.CanonicalID), as notices name the job,
// so an execution whose id is spelled otherwise (an upper-case uuid, an
// integer with leading zeros) is still found by its notice, and its
// LostError names the job by that id.
//
// The returned release function cancels the context and forgets exec; call
// it when the execution ends, as with context.WithCancel. The watcher also
// forgets exec when ctx ends.
func (w *Watcher) Watch(ctx context.Context, exec jobguard.Execution) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancelCause(ctx)
	exec.JobID = w.key(exec.JobID)
	e := &entry{exec: exec, key: exec.JobID, cancel: cancel}
	w.mu.Lock()
	set := w.jobs[e.key]
	if set == nil {
		set = make(map[*entry]struct{})
		w.jobs[e.key] = set
	}
	set[e] = struct{}{}
	w.mu.Unlock()
	stop := context.AfterFunc(wctx, func() { w.take(e) })
	return wctx, func() {
		stop()
		w.take(e)
		cancel(nil)
	}
}

// Len returns the number of executions being watched.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, set := range w.jobs {
		n += len(set)
	}
	return n
}

// Subscribed reports whether the watcher's subscription is up right now:
// notices published now reach it. It is false before Run has subscribed,
// during an outage and after Run returns; a readiness probe can use it.
func (w *Watcher) Subscribed() bool { return w.up.Load() }

// Ready returns a channel that is closed once Run has subscribed for the
// first time: from then on a notice published reaches the watcher (until an
// outage, which Subscribed reports). A worker can wait for it before taking
// jobs, instead of polling Subscribed.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// take forgets e and reports whether it was still watched, so that exactly
// one caller goes on to cancel it.
func (w *Watcher) take(e *entry) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.jobs[e.key]
	if _, ok := set[e]; !ok {
		return false
	}
	delete(set, e)
	if len(set) == 0 {
		delete(w.jobs, e.key)
	}
	return true
}

// key is jobID as the id column prints it, the form notices and checks name
// a job by; an id that is no id of the table stays as given.
func (w *Watcher) key(jobID string) string {
	if id, err := w.cfg.Guard.CanonicalID(jobID); err == nil {
		return id
	}
	return jobID
}

// cancelWhere cancels, with the cause made by why, every watched execution
// of jobID that match accepts, and returns how many.
func (w *Watcher) cancelWhere(ctx context.Context, jobID string, match func(jobguard.Execution) bool, why func(*entry) *LostError) int {
	w.mu.Lock()
	var hit []*entry
	for e := range w.jobs[jobID] {
		if match(e.exec) {
			hit = append(hit, e)
		}
	}
	w.mu.Unlock()
	n := 0
	for _, e := range hit {
		if w.take(e) {
			w.fire(ctx, e, why(e))
			n++
		}
	}
	return n
}

// fire cancels e's context with cause.
func (w *Watcher) fire(ctx context.Context, e *entry, cause *LostError) {
	defer e.cancel(cause)
	attrs := []any{slog.String("job_id", e.exec.JobID), slog.Int64("generation", e.exec.Generation),
		slog.String("via", cause.Via.String()), slog.Bool("cancelled", cause.Cancelled)}
	switch cause.Via {
	case ViaNotice:
		attrs = append(attrs, slog.Int64("notice_generation", cause.Seen))
	case ViaCheck:
		attrs = append(attrs, slog.String("status", cause.Status), slog.Int64("row_generation", cause.Seen))
	case ViaHeartbeat:
		attrs = append(attrs, slog.Any("error", cause.Err))
	}
	w.log.InfoContext(ctx, "watch: execution lost its job; its context is cancelled", attrs...)
}

// Lost cancels exec's context when err wraps jobguard.ErrJobTerminal: a
// heartbeat (heartbeat's Lost result) or another conditional write of exec
// affected zero rows. It reports whether a watched context was cancelled;
// any other error is left to the caller.
func (w *Watcher) Lost(ctx context.Context, exec jobguard.Execution, err error) bool {
	if !errors.Is(err, jobguard.ErrJobTerminal) {
		return false
	}
	// The refusal read the row: an operator's cancel says so in its reason.
	var refused *jobguard.StateError
	cancelled := errors.As(err, &refused) && w.rules.shared.Cancelled(refused.FailureReason)
	return w.cancelWhere(ctx, w.key(exec.JobID),
		func(x jobguard.Execution) bool { return x.Generation == exec.Generation },
		func(e *entry) *LostError {
			return &LostError{JobID: e.exec.JobID, Generation: exec.Generation, Via: ViaHeartbeat, Err: err, Cancelled: cancelled}
		}) > 0
}

// notice applies one notice. On a fenced table it cancels the job's
// executions at the noticed generation or older: the reclaim fenced all of
// them out, while an execution started after it has a higher generation and
// is left alone. Without generations a notice cannot tell the executions of
// a job apart, so it asks for a check of the rows instead.
func (w *Watcher) notice(ctx context.Context, n Notice, cancelled bool) {
	if !w.rules.fenced {
		w.mu.Lock()
		watched := len(w.jobs[w.key(n.JobID)]) > 0
		w.mu.Unlock()
		if watched {
			w.requestCheck()
		}
		return
	}
	w.cancelWhere(ctx, w.key(n.JobID),
		func(x jobguard.Execution) bool { return x.Generation <= n.Generation },
		func(e *entry) *LostError {
			return &LostError{JobID: e.exec.JobID, Generation: e.exec.Generation, Via: ViaNotice, Seen: n.Generation, Cancelled: cancelled}
		})
}

// deliver applies a received payload's notices of the watcher's jobs table
// and ignores those of other tables. One it cannot read, or that does not
// say its table, may still have announced a reclaim of one of its jobs, so
// it asks for a check.
func (w *Watcher) deliver(ctx context.Context, payload string) {
	ns, err := decode(payload)
	if err != nil {
		w.log.WarnContext(ctx, "watch: ignoring an unreadable notice; checking every execution instead", slog.Any("error", err))
		w.requestCheck()
		return
	}
	for _, n := range ns {
		switch n.Table {
		case w.table:
			w.notice(ctx, Notice{JobID: n.JobID, Generation: n.Generation}, n.Cancelled)
		case "":
			w.requestCheck()
		}
	}
}

// requestCheck asks the check loop for a check now; requests made while one
// is pending collapse into it.
func (w *Watcher) requestCheck() {
	select {
	case w.checkNow <- struct{}{}:
	default:
	}
}

// Run keeps the watcher's one subscription and its periodic check going
// until ctx ends, then returns nil once both have stopped. After a lost
// subscription it resubscribes with a doubling backoff and, once
// subscribed again, checks every execution at once, since notices sent in
// between were missed. A second concurrent Run returns an error.
//
// Watched contexts are not cancelled when Run returns; they just stop being
// watched for notices and checks (Lost still works).
//
// A check whose read panics, or does not return a second after its
// timeout (the longer of CheckInterval and a second), fails and is logged
// with the stack, and the next check runs at the next interval; an
// abandoned read is left to return on its own. A subscription that panics
// is lost and resubscribed like one whose connection failed. A panicking
// logger does not stop Run either.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("watch: run: already running")
	}
	defer w.running.Store(false)
	var wg sync.WaitGroup
	wg.Go(func() { w.keep(ctx, w.listen) })
	w.keep(ctx, w.checkLoop)
	wg.Wait()
	return nil
}

// keep runs loop until ctx ends. A check or a session that panics fails on
// its own; a panic that reaches keep (the logger's) is logged, and loop
// starts again after ReconnectMin.
func (w *Watcher) keep(ctx context.Context, loop func(context.Context)) {
	for {
		err := safe.Call(func() error {
			loop(ctx)
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		safe.Recovered(ctx, w.log, "watch: recovered from a panic; starting again", err)
		t := time.NewTimer(w.cfg.ReconnectMin)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (w *Watcher) checkLoop(ctx context.Context) {
	tick := time.NewTicker(w.cfg.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-w.checkNow:
		}
		// A check stuck on a dead connection must not hold up the next one;
		// a very short interval still leaves the query a second. A read
		// that ignores its context is abandoned a moment later, and one
		// that panics fails the check.
		cctx, cancel := context.WithTimeout(ctx, max(w.cfg.CheckInterval, time.Second))
		err := safe.Bounded(cctx, safe.Grace, func(ctx context.Context) error {
			_, err := w.Check(ctx)
			return err
		})
		cancel()
		if err != nil && ctx.Err() == nil {
			w.log.LogAttrs(ctx, slog.LevelWarn, "watch: check failed; trying again at the next interval",
				append([]slog.Attr{slog.Any("error", err), slog.Duration("check_interval", w.cfg.CheckInterval)},
					safe.Attrs(err)...)...)
		}
		w.checks.Add(1)
	}
}

// listen runs subscription sessions back to back until ctx ends.
func (w *Watcher) listen(ctx context.Context) {
	delay := w.cfg.ReconnectMin
	var downSince time.Time // zero while subscribed
	subscribed := func() {
		if !downSince.IsZero() {
			w.log.InfoContext(ctx, "watch: subscription restored; checking every execution",
				slog.Duration("outage", w.cfg.Now().Sub(downSince)))
		}
		downSince, delay = time.Time{}, w.cfg.ReconnectMin
		w.up.Store(true)
		w.readyOne.Do(func() { close(w.ready) })
		w.requestCheck()
	}
	defer w.up.Store(false)
	for {
		// A session that panics (its client's, or a notice's) is lost like
		// one whose connection failed.
		err := safe.Call(func() error {
			return w.lis.session(ctx, subscribed, func(p string) { w.deliver(ctx, p) })
		})
		w.up.Store(false)
		if ctx.Err() != nil {
			return
		}
		if downSince.IsZero() {
			downSince = w.cfg.Now()
			w.log.LogAttrs(ctx, slog.LevelWarn, "watch: subscription lost; reconnecting",
				append([]slog.Attr{slog.Any("error", err)}, safe.Attrs(err)...)...)
		} else {
			w.log.DebugContext(ctx, "watch: resubscribe failed", slog.Any("error", err), slog.Duration("retry_in", delay))
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(interval.Sum(delay, delay), w.cfg.ReconnectMax) // saturates: a long cap never wraps
	}
}
