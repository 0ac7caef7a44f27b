package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/internal/testkit/history"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/watch"
)

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	// DatabaseURL reaches the run's schema (search_path included).
	DatabaseURL string
	// RedisAddr is the run's private Redis. In a Postgres-only run it is a
	// closed port, and no Redis client is built.
	RedisAddr string
	// PostgresOnly runs the worker with no Redis at all: the reclaim
	// markers in the marker table, the start guard built with a nil Redis
	// client, and a watch.Watcher hearing the reclaim notices over
	// LISTEN/NOTIFY.
	PostgresOnly bool
	// Prefix is the guard's Shared.Prefix: it namespaces the reclaim
	// markers.
	Prefix string
	// Incarnation identifies this process in events, kills and confirmed.
	Incarnation int
	// Concurrency is the number of jobs processed at once.
	Concurrency int
	// AppName is the application_name of the worker's connections, so the
	// driver can find them to terminate.
	AppName string
	// Timing holds the run's limits.
	Timing Timing
	// Logger receives the library's warnings.
	Logger *slog.Logger
}

// Worker processes jobs from the queue table through the public API.
type Worker struct {
	cfg    WorkerConfig
	pool   *pgxpool.Pool
	guard  *jobguard.Guard
	starts *jobguard.StartGuard
	hb     *heartbeat.Heartbeat
	// settler finalizes videos with a record the run's settle sweeps
	// finish.
	settler *settle.Settler
	// rec records what the worker does in the run's history.
	rec *Recorder
	// watcher cancels the call of an execution whose job was reclaimed
	// (Postgres-only runs); nil otherwise.
	watcher *watch.Watcher
	// lease is the process's worker lease, the owner of every execution
	// it starts.
	lease *lease.Lease
}

// ErrLeaseLost is RunWorker's error when the process's lease ended: it
// started nothing more, let its running executions meet their guarded
// writes, and stopped.
var ErrLeaseLost = errors.New("chaos: worker: the process's lease ended")

// delivery is one claimed queue row.
type delivery struct {
	id       string
	delivery int
	token    string
	kind     string
	parent   string
	plan     Plan
}

// RunWorker processes jobs until ctx ends.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("chaos: worker: %w", redact.New(cfg.DatabaseURL).Error(err))
	}
	pcfg.MaxConns = int32(cfg.Concurrency*3 + 2)
	pcfg.ConnConfig.RuntimeParams["application_name"] = cfg.AppName
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("chaos: worker: %w", err)
	}
	defer pool.Close()
	// The history's own statements commit without waiting for the WAL
	// flush: committed and visible at once, so no kill of this process can
	// lose one; only a crash of the server could, which the run never
	// causes. The workers' own transactions keep the server's setting.
	hcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("chaos: worker: %w", redact.New(cfg.DatabaseURL).Error(err))
	}
	hcfg.MaxConns = int32(cfg.Concurrency + 1)
	hcfg.ConnConfig.RuntimeParams["application_name"] = cfg.AppName + "-history"
	hcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	hpool, err := pgxpool.NewWithConfig(ctx, hcfg)
	if err != nil {
		return fmt.Errorf("chaos: worker: %w", err)
	}
	defer hpool.Close()
	// A nil Redis in a Postgres-only run: any use of it would fail.
	var rdb marker.Redis
	markers := jobguard.MarkersPostgres
	if !cfg.PostgresOnly {
		client := redis.NewClient(&redis.Options{
			Addr: cfg.RedisAddr, DialTimeout: 200 * time.Millisecond,
			ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1,
		})
		defer client.Close()
		rdb, markers = client, jobguard.MarkersRedis
	}
	guard, err := jobguard.NewWithConfig(ctx, pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: jobguard.Shared{Prefix: cfg.Prefix, Markers: markers}})
	if err != nil {
		return fmt.Errorf("chaos: worker: %w", err)
	}
	l, lpool, err := startLease(ctx, cfg)
	if err != nil {
		return err
	}
	defer lpool.Close()
	starts, err := jobguard.NewStartGuard(guard, rdb, jobguard.StartGuardConfig{Logger: cfg.Logger, Owner: l})
	if err != nil {
		return fmt.Errorf("chaos: worker: %w", err)
	}
	w := &Worker{
		cfg: cfg, pool: pool, guard: guard, starts: starts, lease: l,
		hb: heartbeat.New(guard, heartbeat.Config{Interval: cfg.Timing.Heartbeat, Logger: cfg.Logger}),
	}
	w.rec = NewRecorder(WorkerProcess(cfg.Incarnation), func(sql string, args ...any) { keep(hpool, sql, args...) })
	w.settler, err = NewSettler(ctx, guard, pool, cfg.Timing, true, w.rec, cfg.Logger)
	if err != nil {
		return fmt.Errorf("chaos: worker: %w", err)
	}
	return w.run(ctx)
}

// run processes jobs until ctx ends or the lease is lost. A lost lease
// stops the claims, not the running executions: like a process that
// heeds Lost late, they go on to their heartbeats and saves, which the
// generation refuses if their jobs were rescued.
func (w *Worker) run(ctx context.Context) error {
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var watching sync.WaitGroup
	if w.cfg.PostgresOnly {
		var err error
		if w.watcher, err = newWatcher(runCtx, w.cfg, w.guard, w.pool); err != nil {
			return err
		}
		watching.Go(func() { _ = w.watcher.Run(runCtx) })
	}
	claims, stopClaims := context.WithCancel(ctx)
	defer stopClaims()
	go func() {
		select {
		case <-w.lease.Lost():
			stopClaims()
		case <-claims.Done():
		}
	}()
	var loops sync.WaitGroup
	for range w.cfg.Concurrency {
		loops.Go(func() { w.loop(ctx, claims) })
	}
	loops.Wait()
	stopRun()
	watching.Wait()
	// A lease that lapsed on the database's clock is lost by the process's
	// own measure within its TTL: wait that long for it even on a clean
	// stop, so that every rescue of this process's jobs is explained by
	// an event.
	select {
	case <-w.lease.Lost():
	case <-time.After(w.cfg.Timing.WorkerTTL):
	}
	if err := w.lease.Err(); err != nil && !errors.Is(err, lease.ErrReleased) {
		w.bookkeeping(`INSERT INTO events (kind, incarnation, detail) VALUES ($1, $2, $3)`,
			EventLeaseLost, w.cfg.Incarnation, err.Error())
		return ErrLeaseLost
	}
	return w.lease.Stop(context.Background())
}

// startLease takes the process's worker lease, on a pool of its own
// (application_name "<AppName>-lease"), so that long executions cannot
// starve its renewals. Its ID is the process's name in the history.
func startLease(ctx context.Context, cfg WorkerConfig) (*lease.Lease, *pgxpool.Pool, error) {
	lcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("chaos: worker: %w", redact.New(cfg.DatabaseURL).Error(err))
	}
	lcfg.MaxConns = 2
	lcfg.ConnConfig.RuntimeParams["application_name"] = cfg.AppName + "-lease"
	lpool, err := pgxpool.NewWithConfig(ctx, lcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("chaos: worker: %w", err)
	}
	l, err := lease.New(lpool, lease.Config{ID: WorkerProcess(cfg.Incarnation), TTL: cfg.Timing.WorkerTTL,
		Renew: cfg.Timing.WorkerRenew, Timeout: cfg.Timing.WorkerTTL / 2, Logger: cfg.Logger})
	if err == nil {
		err = l.Start(ctx)
	}
	if err != nil {
		lpool.Close()
		return nil, nil, fmt.Errorf("chaos: worker: %w", err)
	}
	return l, lpool, nil
}

// newWatcher builds the watcher of a Postgres-only worker: it listens on
// a pool of its own (application_name "<AppName>-listen", so the driver can
// terminate the listening session) and checks the watched rows every
// 200ms on pool.
func newWatcher(ctx context.Context, cfg WorkerConfig, guard *jobguard.Guard, pool *pgxpool.Pool) (*watch.Watcher, error) {
	lcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("chaos: worker: %w", redact.New(cfg.DatabaseURL).Error(err))
	}
	lcfg.MaxConns = 2
	lcfg.ConnConfig.RuntimeParams["application_name"] = cfg.AppName + "-listen"
	listen, err := pgxpool.NewWithConfig(ctx, lcfg)
	if err != nil {
		return nil, fmt.Errorf("chaos: worker: %w", err)
	}
	context.AfterFunc(ctx, listen.Close)
	w, err := watch.New(watch.Config{
		Guard: guard, DB: pool, Transport: watch.Transport{Postgres: listen},
		CheckInterval: 200 * time.Millisecond, PingInterval: time.Second,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 500 * time.Millisecond, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: worker: %w", err)
	}
	return w, nil
}

// WorkerProcess is the name of a worker incarnation in the history.
func WorkerProcess(incarnation int) string { return "w" + strconv.Itoa(incarnation) }

// loop claims and processes jobs until claims ends; each job runs on ctx.
func (w *Worker) loop(ctx, claims context.Context) {
	for claims.Err() == nil {
		d, ok, err := w.claim(claims)
		if err != nil || !ok {
			sleep(claims, 15*time.Millisecond)
			continue
		}
		w.process(ctx, d)
	}
}

// claim takes the next visible queue row and pushes it a lease ahead.
func (w *Worker) claim(ctx context.Context) (d delivery, ok bool, err error) {
	var payload []byte
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			SELECT q.job_id::text, q.deliveries + 1, j.type, coalesce(j.parent_id, ''), j.payload
			FROM queue q JOIN jobs j ON j.id = q.job_id
			WHERE q.visible_at <= now()
			ORDER BY q.visible_at LIMIT 1
			FOR UPDATE OF q SKIP LOCKED`).Scan(&d.id, &d.delivery, &d.kind, &d.parent, &payload)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `UPDATE queue SET visible_at = now() + $2::interval, deliveries = $3, token = gen_random_uuid()
			WHERE job_id = $1 RETURNING token::text`, d.id, w.cfg.Timing.Lease.String(), d.delivery).Scan(&d.token)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	if err := json.Unmarshal(payload, &d.plan); err != nil {
		return d, false, fmt.Errorf("job %s: plan: %w", d.id, err)
	}
	if d.delivery > 1 {
		// Faults are for the first delivery; a redelivery runs plainly.
		d.plan = Plan{Work: 10 * time.Millisecond, Quantity: d.plan.Quantity, Account: d.plan.Account,
			Upper: d.plan.Upper, NoUpdates: d.plan.NoUpdates}
	}
	return d, true, nil
}

func (w *Worker) process(ctx context.Context, d delivery) {
	var exec jobguard.Execution
	call := w.rec.Invoke(history.OpStart, d.id, 0)
	err := w.inTx(ctx, "start", 0, func(tx pgx.Tx) error {
		var err error
		id := d.id
		if d.plan.Upper {
			id = strings.ToUpper(id)
		}
		if exec, err = w.starts.Start(ctx, tx, id); err != nil {
			return err
		}
		return call.OK(ctx, tx, exec.Generation)
	})
	if err != nil {
		call.Outcome(err)
		if jobguard.IsPermanent(err) {
			w.event(EventStartRefused, d.id, 0, err.Error())
			w.done(d)
		} else {
			w.event(EventStartError, d.id, 0, err.Error())
			w.release(d)
		}
		return
	}
	defer w.hb.Forget(d.id)
	callCtx, watched, release := w.watch(ctx, d, exec)
	defer release()
	if err := w.work(ctx, callCtx, d, exec); err != nil {
		w.lost(d, err) // lost the job: its new owner (or nobody) decides
		return
	}
	if w.cancelled(callCtx, watched, d, exec) {
		w.lost(d, nil) // the call stopped: there is no result to save
		return
	}
	w.event(EventSaving, d.id, exec.Generation, "")
	if d.kind == KindVideo {
		w.finalizeVideo(ctx, d, exec)
	} else {
		w.saveChapters(ctx, d, exec)
	}
}

// watch returns the context the execution's call runs under, the
// watched context, and its release. In a Postgres-only run the watcher
// watches every execution: half the calls (by the job id's last digit)
// run under the watched context and stop when it is cancelled, as a model
// call given its context does; the other half ignore it, so that their
// late result still meets the guarded completion. Otherwise both are ctx.
func (w *Worker) watch(ctx context.Context, d delivery, exec jobguard.Execution) (call, watched context.Context, release context.CancelFunc) {
	if w.watcher == nil {
		return ctx, ctx, func() {}
	}
	watched, release = w.watcher.Watch(ctx, exec)
	if strings.IndexByte("02468ace", d.id[len(d.id)-1]) < 0 {
		return ctx, watched, release
	}
	return watched, watched, release
}

// cancelled records a call whose execution the watcher found reclaimed,
// with how it learned (notice, check), and reports whether the call
// stopped for it.
func (w *Worker) cancelled(call, watched context.Context, d delivery, exec jobguard.Execution) bool {
	var lost *watch.LostError
	if !errors.As(context.Cause(watched), &lost) {
		return false
	}
	w.event(EventCancelled, d.id, exec.Generation, lost.Via.String())
	return call.Err() != nil
}

// work is the model call or the encode, run under call. A hung call sleeps
// without a heartbeat; the rest beat progress, on ctx. It returns the
// refusal of a heartbeat that found the job lost.
func (w *Worker) work(ctx, call context.Context, d delivery, exec jobguard.Execution) error {
	if d.plan.Hang {
		sleep(call, d.plan.Work)
		return nil
	}
	start := time.Now()
	for step := 0; time.Since(start) < d.plan.Work && call.Err() == nil; step++ {
		sleep(call, 15*time.Millisecond)
		ev := heartbeat.Progress(min(99, int(100*time.Since(start)/d.plan.Work)))
		if d.kind == KindVideo {
			ev = heartbeat.Output(int64(4096 * (step + 1)))
		}
		var res heartbeat.Result
		err := w.inTx(ctx, "worker", exec.Generation, func(tx pgx.Tx) error {
			var err error
			if res, err = w.hb.Beat(ctx, tx, exec, ev); err != nil || res != heartbeat.Written {
				return err
			}
			return w.rec.OK(ctx, tx, 0, history.OpHeartbeat, d.id, exec.Generation, "")
		})
		if res == heartbeat.Lost {
			w.rec.Outcome(0, history.OpHeartbeat, d.id, exec.Generation, err)
			w.event(EventHeartbeatLost, d.id, exec.Generation, err.Error())
			w.rejected(d, exec, err)
			return err
		}
	}
	return nil
}

func (w *Worker) saveChapters(ctx context.Context, d delivery, exec jobguard.Execution) {
	call := w.rec.Invoke(history.OpComplete, d.id, exec.Generation)
	err := w.guard.CompleteTx(ctx, w.pool, exec, func(tx pgx.Tx) error {
		if err := setActor(ctx, tx, "worker", exec.Generation); err != nil {
			return err
		}
		for c := range 3 {
			var chapter int64
			if err := tx.QueryRow(ctx, `INSERT INTO chapters (course_id, job_id, generation) VALUES ($1, $2, $3) RETURNING id`,
				d.parent, d.id, exec.Generation).Scan(&chapter); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO lessons (chapter_id, job_id, generation) SELECT $1, $2, $3 FROM generate_series(1, 2)`,
				chapter, d.id, exec.Generation); err != nil {
				return err
			}
			if c == 0 && d.plan.Pause > 0 {
				sleep(ctx, d.plan.Pause) // mid-save: a kill or a terminated connection lands here
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE courses SET status = 'READY', weeks = weeks + 3 WHERE id = $1`, d.parent)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("course %s: %d rows", d.parent, tag.RowsAffected())
		}
		if err != nil {
			return err
		}
		return call.OK(ctx, tx, exec.Generation)
	})
	if err != nil {
		call.Outcome(err)
	}
	switch {
	case err == nil:
		w.event(EventCompleted, d.id, exec.Generation, "")
		w.done(d)
	case errors.Is(err, jobguard.ErrJobTerminal):
		w.rejected(d, exec, err)
		w.lost(d, err)
	default:
		w.event(EventSaveError, d.id, exec.Generation, err.Error())
		w.release(d)
	}
}

var errDeleted = errors.New("video was deleted")

func (w *Worker) finalizeVideo(ctx context.Context, d delivery, exec jobguard.Execution) {
	call := w.rec.Invoke(history.OpComplete, d.id, exec.Generation)
	res, err := w.settler.Finalize(ctx, w.pool, exec, w.finalizeSpec(d, exec, call))
	fin := res.Finalized
	if !fin.Completed() {
		call.Outcome(err)
	}
	switch {
	case errors.Is(err, jobguard.ErrStopped):
		w.failStopped(ctx, d, exec)
	case fin.Rejected():
		w.rejected(d, exec, err)
		w.lost(d, err)
	case fin.Completed():
		w.finalized(d, exec, res, err)
	default:
		w.event(EventSaveError, d.id, exec.Generation, fmt.Sprint(err))
		w.release(d)
	}
}

// finalizeSpec is the video's finalize: its re-check (the plan may have
// deleted the video), and the completion's own writes, the video READY
// and the call's ok in history.
func (w *Worker) finalizeSpec(d delivery, exec jobguard.Execution, call Call) settle.Spec {
	spec := videoSpec(d.parent, d.plan)
	spec.Recheck = func(context.Context) error {
		if d.plan.Deleted {
			return errDeleted
		}
		return nil
	}
	spec.Complete = func(ctx context.Context, tx pgx.Tx) error {
		if err := setActor(ctx, tx, "worker", exec.Generation); err != nil {
			return err
		}
		if d.plan.Pause > 0 {
			sleep(ctx, d.plan.Pause)
		}
		tag, err := tx.Exec(ctx, `UPDATE videos SET status = 'READY', seconds_ms = $2 WHERE id = $1`, d.parent, d.plan.Quantity)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("video %s: %d rows", d.parent, tag.RowsAffected())
		}
		if err != nil {
			return err
		}
		return call.OK(ctx, tx, exec.Generation)
	}
	return spec
}

// failStopped fails the job of a finalize its re-check stopped (the video
// was deleted).
func (w *Worker) failStopped(ctx context.Context, d delivery, exec jobguard.Execution) {
	fail := w.rec.Invoke(history.OpFail, d.id, exec.Generation)
	ferr := w.inTx(ctx, "worker", exec.Generation, func(tx pgx.Tx) error {
		if err := w.guard.Fail(ctx, tx, exec, "video deleted"); err != nil {
			return err
		}
		return fail.OK(ctx, tx, exec.Generation)
	})
	if ferr != nil {
		fail.Outcome(ferr)
	}
	switch {
	case ferr == nil:
		w.event(EventStopped, d.id, exec.Generation, "")
		w.done(d)
	case errors.Is(ferr, jobguard.ErrJobTerminal):
		w.rejected(d, exec, ferr)
		w.lost(d, ferr)
	default:
		w.event(EventSaveError, d.id, exec.Generation, ferr.Error())
		w.release(d)
	}
}

// finalized records a finalize whose completion committed: confirmed, and
// billed by the worker or left to the settle sweep.
func (w *Worker) finalized(d delivery, exec jobguard.Execution, res settle.Result, err error) {
	w.event(EventCompleted, d.id, exec.Generation, "")
	if res.Finalized.Confirmed() {
		w.bookkeeping(`INSERT INTO confirmed (job_id, generation, incarnation) VALUES ($1, $2, $3)`,
			d.id, exec.Generation, w.cfg.Incarnation)
	}
	switch {
	case res.Settled && len(res.Accruals) > 0 && res.Accruals[0].Accrued:
		w.event(EventAccrued, d.id, exec.Generation, "")
	case !res.Settled:
		// Completed, its record pending: the settle sweep finishes it.
		w.event(EventUnsettled, d.id, exec.Generation, err.Error())
	}
	w.done(d)
}

// rejected records a refused write under the reason the guard gave.
func (w *Worker) rejected(d delivery, exec jobguard.Execution, err error) {
	kind := EventOtherRejected
	var se *jobguard.StateError
	if errors.As(err, &se) {
		switch {
		case se.Reason == jobguard.ReasonSuperseded:
			kind = EventStaleRefused
		case se.Reason == jobguard.ReasonStatus && se.Status == "FAILED":
			kind = EventLateRejected
		}
	}
	w.event(kind, d.id, exec.Generation, err.Error())
}

// inTx runs fn in a transaction whose writes the audit triggers attribute
// to actor and to the execution's generation.
func (w *Worker) inTx(ctx context.Context, actor string, gen int64, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if err := setActor(ctx, tx, actor, gen); err != nil {
			return err
		}
		return fn(tx)
	})
}

// setActor names the writer of the transaction for the audit triggers.
func setActor(ctx context.Context, tx pgx.Tx, actor string, gen int64) error {
	g := ""
	if actor == "worker" {
		g = strconv.FormatInt(gen, 10)
	}
	_, err := tx.Exec(ctx, `SELECT set_config('chaos.actor', $1, true), set_config('chaos.writer_gen', $2, true)`, actor, g)
	return err
}

// bookkeeping runs the queue and event writes on a context of their own:
// they must happen even while the job's context ends.
func (w *Worker) bookkeeping(sql string, args ...any) { keep(w.pool, sql, args...) }

// keep runs a statement on pool, on a context of its own, until it lands
// (twenty tries).
func keep(pool *pgxpool.Pool, sql string, args ...any) {
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := pool.Exec(ctx, sql, args...)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *Worker) event(kind, jobID string, gen int64, detail string) {
	w.bookkeeping(`INSERT INTO events (kind, job_id, generation, incarnation, detail) VALUES ($1, $2, $3, $4, $5)`,
		kind, jobID, gen, w.cfg.Incarnation, detail)
}

// done removes the queue row, unless a later delivery has claimed it.
func (w *Worker) done(d delivery) {
	w.bookkeeping(`DELETE FROM queue WHERE job_id = $1 AND token = $2`, d.id, d.token)
}

// lost ends a delivery whose execution lost its job, refused with err
// or, when err is nil, stopped by the watcher: a job sent back to QUEUED
// under a new generation (a rescue) needs its delivery again, and is
// released; otherwise the job is another execution's or is over, and the
// row is removed. The status is the refusal's, or read from the row.
func (w *Worker) lost(d delivery, err error) {
	var se *jobguard.StateError
	var status string
	switch {
	case errors.As(err, &se):
		status = se.Status
	case err == nil:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.pool.QueryRow(ctx, `SELECT status FROM jobs WHERE id = $1`, d.id).Scan(&status)
		cancel()
	}
	if status == jobguard.StatusQueuedDefault {
		w.release(d)
		return
	}
	w.done(d)
}

// release makes the row visible again soon, unless a later delivery has
// claimed it.
func (w *Worker) release(d delivery) {
	w.bookkeeping(`UPDATE queue SET visible_at = now() + interval '50 milliseconds' WHERE job_id = $1 AND token = $2`,
		d.id, d.token)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
