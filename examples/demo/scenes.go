package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/usage"
	"github.com/jobguard/jobguard/watch"
)

// Scenes 1 and 2 share one sweep: it must reclaim the two hung chapter jobs
// and leave the slow, progressing video alone. One hung job runs in a
// worker with the watcher, the other in a worker without it, so that the
// scene shows both guarantees: the reclaim cancels the watched call at once,
// and the unwatched call, which runs to its end, has its save refused.
func (d *demo) hungChapterAndSlowVideo(ctx context.Context) error {
	tl, w := d.tl, d.w
	tl.heading("Scenes 1 and 2: two chapter jobs whose model calls hang, and a slow video encode that keeps making progress")
	chapterJob, unwatchedJob, videoJob, healthyJob, err := d.enqueueScenes1And2(ctx)
	if err != nil {
		return err
	}
	tl.at("queued chapter jobs %s (add 2 weeks to course-1) and %s (add 2 weeks to course-3), video job %s (encode video-1) and chapter job %s (add a week to course-2)",
		short(chapterJob), short(unwatchedJob), short(videoJob), short(healthyJob))

	hang, unwatchedHang := sim.NewGate(), sim.NewGate()
	defer hang.Release() // only a cancellation ends the watched call
	chapters := w.chapters(sim.Model{Call: sim.Call{Hang: hang}})
	unwatched := w.chapters(sim.Model{Call: sim.Call{Hang: unwatchedHang}})
	unwatched.Watcher = nil // a worker that receives no notices
	videos := w.videos(sim.Encoder{Steps: 60, StepDelay: stepDelay, Seconds: 90})
	chapterDone := d.goDeliver(ctx, flow.TypeChapter, chapterJob, func(ctx context.Context, id string) error {
		_, err := chapters.Process(ctx, id)
		return err
	})
	var unwatchedRes flow.ChapterResult
	unwatchedDone := d.goDeliver(ctx, flow.TypeChapter, unwatchedJob, func(ctx context.Context, id string) (err error) {
		unwatchedRes, err = unwatched.Process(ctx, id)
		return err
	})
	var videoRes flow.VideoResult
	videoDone := d.goDeliver(ctx, flow.TypeVideo, videoJob, func(ctx context.Context, id string) (err error) {
		videoRes, err = videos.Process(ctx, id)
		return err
	})
	healthy := w.chapters(sim.Model{Call: sim.Call{Latency: 200 * time.Millisecond}})
	var healthyRes flow.ChapterResult
	err = d.deliver(ctx, flow.TypeChapter, healthyJob, func(ctx context.Context, id string) (err error) {
		healthyRes, err = healthy.Process(ctx, id)
		return err
	})
	tl.at("chapter job %s: the model answered in 200ms; course-2 now has %d week(s)", short(healthyJob), healthyRes.Total)
	tl.expect(err == nil && healthyRes.Weeks == 1, "a job that is not stuck completes as usual")
	if err := waitForAll(ctx, hang, unwatchedHang); err != nil {
		return err
	}
	tl.at("chapter jobs %s and %s started; their model calls hang and give no sign of life, so nothing heartbeats them",
		short(chapterJob), short(unwatchedJob))
	tl.at("job %s runs in a worker with the watcher (one subscription to reclaim notices per process); job %s in a worker without it, as one deployed with -notices off",
		short(chapterJob), short(unwatchedJob))
	tl.at("video job %s is encoding 60 chunks, %v each; each chunk's progress is a heartbeat (one write per %v at most)",
		short(videoJob), stepDelay, beatEvery)
	if err := sleep(ctx, overLimit); err != nil {
		return err
	}
	// Sweep right after a heartbeat of the video, so that a slow machine
	// cannot make the story lie: the video must be seen mid-encode.
	if err := d.freshHeartbeat(ctx, videoJob); err != nil {
		return err
	}

	// The sweep publishes its notices once its write has committed; the
	// watched worker's refusal is awaited before the sweep's line is
	// printed, so that the timeline reads in one order on every run.
	var cancelErr error
	var cancelled bool
	rep, err := d.sweep(ctx, func() { cancelErr, cancelled = awaitCancel(chapterDone, hang) })
	if err != nil {
		return err
	}
	tl.expect(rep.Reclaimed == 2 && slices.Contains(rep.ReclaimedIDs, chapterJob) && slices.Contains(rep.ReclaimedIDs, unwatchedJob),
		"both hung chapter jobs were reclaimed: over their limit and no progress for %v", overLimit)
	tl.expect(rep.Progressing == 1, "the video job, over its limit too, was left alone: its updated_at moves")
	courses, _ := d.text(ctx, `SELECT string_agg(id || ' ' || status, ', ' ORDER BY id) FROM courses WHERE id IN ('course-1', 'course-3')`)
	tl.expect(courses == "course-1 FAILED, course-3 FAILED", "%s (the chapter parent rule ran in the reclaim's transaction)", courses)

	// The watched call: the sweep published a notice after its commit.
	err = cancelErr
	tl.at("model call of job %s cancelled: %v", short(chapterJob), err)
	var lost *watch.LostError
	tl.expect(cancelled && errors.As(err, &lost) && lost.Via == watch.ViaNotice && jobguard.IsPermanent(err),
		"the reclaim's notice cancelled the call within a second: it stopped costing money; the refusal is permanent, not retried")
	chapterRows, _ := d.count(ctx, `SELECT count(*) FROM chapters WHERE course_id = 'course-1'`)
	tl.expect(chapterRows == 0, "course-1 has %d chapter rows: the cancelled worker saved nothing", chapterRows)

	// The unwatched call runs to its end; the guarded save refuses it.
	tl.at("the unwatched model call of job %s returns; its worker saves its 2 weeks", short(unwatchedJob))
	unwatchedHang.Release()
	err = <-unwatchedDone
	tl.at("save refused: %v", err)
	tl.expect(errors.Is(err, jobguard.ErrJobTerminal) && jobguard.IsPermanent(err),
		"the refusal is ErrJobTerminal, permanent: the queue will not retry it")
	chapterRows, _ = d.count(ctx, `SELECT count(*) FROM chapters WHERE course_id = 'course-3'`)
	course, _ := d.text(ctx, `SELECT status FROM courses WHERE id = 'course-3'`)
	tl.expect(chapterRows == 0 && course != "READY" && unwatchedRes.Weeks == 0,
		"course-3 has %d chapter rows and is %s, not READY: the completion was the save's first write", chapterRows, course)

	err = <-videoDone // videoRes is written before it is
	d.slowVideoBilledOnce(ctx, videoJob, err, videoRes)
	return nil
}

// enqueueScenes1And2 queues the jobs of scenes 1 and 2: the chapter jobs
// whose calls hang, with and without a watcher, the video job and a
// healthy chapter job.
func (d *demo) enqueueScenes1And2(ctx context.Context) (chapter, unwatched, video, healthy string, err error) {
	pool := d.w.pool
	if chapter, err = flow.EnqueueChapter(ctx, pool, "course-1", 2); err != nil {
		return
	}
	if unwatched, err = flow.EnqueueChapter(ctx, pool, "course-3", 2); err != nil {
		return
	}
	if video, err = flow.EnqueueVideo(ctx, pool, "video-1"); err != nil {
		return
	}
	healthy, err = flow.EnqueueChapter(ctx, pool, "course-2", 1)
	return
}

// waitForAll waits until every gate's call has reached it.
func waitForAll(ctx context.Context, gates ...*sim.Gate) error {
	for _, g := range gates {
		if err := waitFor(ctx, g.Reached()); err != nil {
			return err
		}
	}
	return nil
}

// slowVideoBilledOnce tells how the slow video job, left alone by the
// sweep, ended (err and res are its delivery's): READY, its seconds billed,
// and a replayed accrual billing nothing.
func (d *demo) slowVideoBilledOnce(ctx context.Context, videoJob string, err error, videoRes flow.VideoResult) {
	tl := d.tl
	if err != nil {
		tl.at("video job %s: %v", short(videoJob), err)
	} else {
		tl.at("video job %s finished: %ds encoded; finalize confirmed=%v; usage accrued=%v",
			short(videoJob), videoRes.Seconds, videoRes.Finalize.Confirmed(), videoRes.Accrued)
	}
	video, _ := d.text(ctx, `SELECT status FROM videos WHERE id = 'video-1'`)
	tl.expect(err == nil && videoRes.Finalize.Confirmed() && videoRes.Accrued && video == "READY",
		"video-1 is %s and its seconds were billed", video)
	if err == nil {
		// A replayed message, or a second call, finds the earlier accrual.
		acc, err := usage.Accrue(ctx, d.w.pool, videoRes.Finalize, usage.Entry{
			Account: "acct-1", Meter: flow.MeterVideoSeconds, Quantity: int64(videoRes.Seconds),
		}, nil)
		tl.expect(err == nil && !acc.Accrued, "a replayed accrual of video-1 finds the earlier entry and bills nothing")
	}
}

// Scene 3: a video job reclaimed while its mux hangs, after its last
// progress; the reclaim's notice cancels the mux, and what it made is
// undone.
func (d *demo) reclaimedMidEncode(ctx context.Context) error {
	tl, w := d.tl, d.w
	tl.heading("Scene 3: a video job reclaimed mid-encode is cancelled")
	jobID, err := flow.EnqueueVideo(ctx, w.pool, "video-2")
	if err != nil {
		return err
	}
	d.retried = jobID
	mux := sim.NewGate()
	defer mux.Release() // only a cancellation ends the mux
	videos := w.videos(sim.Encoder{Steps: 4, StepDelay: stepDelay, Seconds: 120, Hang: mux})
	var res flow.VideoResult
	done := d.goDeliver(ctx, flow.TypeVideo, jobID, func(ctx context.Context, id string) (err error) {
		res, err = videos.Process(ctx, id)
		return err
	})
	tl.at("queued and started video job %s (encode video-2), watched; its file is recorded as an artifact", short(jobID))
	if err := waitFor(ctx, mux.Reached()); err != nil {
		return err
	}
	tl.at("the encoder wrote its 4 chunks, then its mux stalls: no progress, so no heartbeat")
	if err := sleep(ctx, overLimit); err != nil {
		return err
	}
	var cancelErr error
	var cancelled bool
	rep, err := d.sweep(ctx, func() { cancelErr, cancelled = awaitCancel(done, mux) })
	if err != nil {
		return err
	}
	tl.expect(rep.Reclaimed == 1 && rep.ReclaimedIDs[0] == jobID, "video job %s was reclaimed", short(jobID))
	m, found, err := w.starts.Markers().Read(ctx, jobID)
	tl.expect(err == nil && found && m.Generation == 1,
		"Redis marker %s records generation %d, reason %q", w.starts.Markers().Key(jobID), m.Generation, m.Reason)

	err = cancelErr
	tl.at("encode cancelled: %v", err)
	var lost *watch.LostError
	tl.expect(cancelled && errors.As(err, &lost) && lost.Via == watch.ViaNotice && jobguard.IsPermanent(err) && !res.Finalize.Confirmed(),
		"the reclaim's notice cancelled the mux within a second; no finalize ran")
	_, statErr := os.Stat(res.File)
	assets, _ := d.count(ctx, `SELECT count(*) FROM assets WHERE video_id = 'video-2'`)
	tl.expect(errors.Is(statErr, fs.ErrNotExist) && assets == 0,
		"its file %s was compensated, and it never wrote its slide asset", shortPath(res.File))
	video, _ := d.text(ctx, `SELECT status FROM videos WHERE id = 'video-2'`)
	ledger, _ := d.count(ctx, `SELECT count(*) FROM usage_ledger WHERE job_id = $1`, jobID)
	tl.expect(video != "READY" && ledger == 0, "video-2 is %s, not READY, and has %d usage rows", video, ledger)
	return nil
}

// Scene 4: the queue delivers the reclaimed job again.
func (d *demo) redelivered(ctx context.Context) error {
	tl := d.tl
	tl.heading("Scene 4: the queue redelivers the reclaimed job")
	videos := d.w.videos(sim.Encoder{Steps: 4, StepDelay: stepDelay})
	err := d.deliver(ctx, flow.TypeVideo, d.retried, func(ctx context.Context, id string) error {
		_, err := videos.Process(ctx, id)
		return err
	})
	tl.at("start refused: %v", err)
	var re *jobguard.ReclaimedError
	tl.expect(errors.As(err, &re) && jobguard.IsPermanent(err),
		"the refusal is ErrReclaimed (evidence: %s), permanent: River would JobCancel, BullMQ UnrecoverableError", source(re))
	status, _ := d.text(ctx, `SELECT status || ' at generation ' || generation FROM jobs WHERE id = $1`, d.retried)
	tl.expect(strings.HasPrefix(status, "FAILED"), "job %s is still %s: Start never moves a FAILED job", short(d.retried), status)
	return nil
}

// Scene 5: an operator's explicit retry runs the job again.
func (d *demo) operatorRetry(ctx context.Context) error {
	tl, w := d.tl, d.w
	tl.heading("Scene 5: an operator retries it")
	gen, err := w.guard.Retry(ctx, w.pool, d.retried)
	if err != nil {
		return err
	}
	tl.at("Retry: job %s is QUEUED at generation %d, reason cleared; the marker of generation 1 no longer applies",
		short(d.retried), gen)
	videos := w.videos(sim.Encoder{Steps: 6, StepDelay: stepDelay, Seconds: 120})
	var res flow.VideoResult
	err = d.deliver(ctx, flow.TypeVideo, d.retried, func(ctx context.Context, id string) (err error) {
		res, err = videos.Process(ctx, id)
		return err
	})
	if err != nil {
		tl.at("video job %s: %v", short(d.retried), err)
	} else {
		tl.at("video job %s finished: %ds encoded; finalize confirmed=%v; usage accrued=%v",
			short(d.retried), res.Seconds, res.Finalize.Confirmed(), res.Accrued)
	}
	video, _ := d.text(ctx, `SELECT status FROM videos WHERE id = 'video-2'`)
	tl.expect(err == nil && res.Finalize.Confirmed() && res.Accrued && video == "READY",
		"video-2 is %s and its seconds were billed once, at generation %d", video, res.Finalize.Execution().Generation)
	return nil
}

// freshHeartbeat waits until jobID is PROCESSING with an updated_at less
// than two heartbeat intervals old, by the database's clock.
func (d *demo) freshHeartbeat(ctx context.Context, jobID string) error {
	for {
		var status string
		var fresh bool
		err := d.w.pool.QueryRow(ctx, `SELECT status, now() - updated_at < $2::interval FROM jobs WHERE id = $1`,
			jobID, (2*beatEvery).String()).Scan(&status, &fresh)
		switch {
		case err != nil:
			return err
		case status != "PROCESSING":
			return fmt.Errorf("video job %s is %s before the sweep: this machine is too slow for the demo's short limits", short(jobID), status)
		case fresh:
			return nil
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// awaitCancel waits for a watched delivery that the sweep just reclaimed
// to end, and reports whether it did within a second, as its cancellation
// should. Past that, it releases the call's gate and waits for the
// delivery's end.
func awaitCancel(done <-chan error, gate *sim.Gate) (error, bool) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		return err, true
	case <-t.C:
		gate.Release()
		return <-done, false
	}
}

// sweep runs one reclaimer pass and prints its report. Each of then runs
// after the pass, before the report is printed.
func (d *demo) sweep(ctx context.Context, then ...func()) (reclaim.Report, error) {
	rep, err := d.rec.Sweep(ctx)
	if err != nil {
		return rep, err
	}
	for _, f := range then {
		f()
	}
	d.mu.Lock()
	d.reports = append(d.reports, rep)
	d.mu.Unlock()
	ids := make([]string, len(rep.ReclaimedIDs))
	for i, id := range rep.ReclaimedIDs {
		ids[i] = short(id)
	}
	d.tl.at("reclaimer sweep: scanned %d, reclaimed %d %v, progressing %d, within limit %d, lost race %d, marker errors %d, notice errors %d",
		rep.Scanned, rep.Reclaimed, ids, rep.Progressing, rep.WithinLimit, rep.LostRace, rep.MarkerErrors, rep.NoticeErrors)
	return rep, nil
}

// deliver runs one delivery through the worker and keeps its error.
func (d *demo) deliver(ctx context.Context, typ, jobID string, process func(context.Context, string) error) error {
	err := flow.Deliver(ctx, d.log, typ, jobID, process)
	if err != nil {
		d.mu.Lock()
		d.refusals[jobID] = append(d.refusals[jobID], err)
		d.mu.Unlock()
	}
	return err
}

// goDeliver is deliver in a goroutine; the channel gets its error.
func (d *demo) goDeliver(ctx context.Context, typ, jobID string, process func(context.Context, string) error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- d.deliver(ctx, typ, jobID, process) }()
	return done
}

func (d *demo) text(ctx context.Context, sql string, args ...any) (string, error) {
	var s string
	err := d.w.pool.QueryRow(ctx, sql, args...).Scan(&s)
	return s, err
}

func (d *demo) count(ctx context.Context, sql string, args ...any) (int, error) {
	var n int
	err := d.w.pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

func source(re *jobguard.ReclaimedError) string {
	if re == nil {
		return "none"
	}
	return fmt.Sprintf("%s says %q", re.Source, re.Reason)
}

func shortPath(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

func waitFor(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
