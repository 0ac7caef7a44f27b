package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// invariant is one of the library's numbered invariants, checked against the rows.
type invariant struct {
	// num is the invariant's number, as the chaos checker numbers it too.
	num   int
	title string
	check func(ctx context.Context) (held bool, detail string, err error)
}

// invariants checks every invariant against the database (and, for the
// visibility of refusals, against what the callers and the log saw), prints
// one line each, and reports whether all held.
func (d *demo) invariants(ctx context.Context) (bool, error) {
	d.tl.heading("Invariants, computed from the database (docs/guarantees.md: the tests behind each)")
	all := true
	for _, inv := range d.checks() {
		held, detail, err := inv.check(ctx)
		if err != nil {
			return false, fmt.Errorf("invariant %d: %w", inv.num, err)
		}
		verdict := "HELD"
		if !held {
			verdict, all = "BROKEN", false
		}
		d.tl.say("  invariant %-2d %-6s %s\n                    %s", inv.num, verdict, inv.title, detail)
	}
	return all, nil
}

// checks are the invariants in their numbered order, the numbering of
// docs/guarantees.md, which names the tests and checkers behind each.
func (d *demo) checks() []invariant {
	return []invariant{
		{1, "A job never leaves FAILED except through Retry", d.failedStaysFailed},
		{2, "No product row or READY parent for a job that is not COMPLETED", d.noOrphanProducts},
		{3, "Usage accrued exactly once per confirmed finalize, never for a rejected one", d.usageOnce},
		{4, "A reclaim that lost the race changes nothing: no parent, no marker", d.reclaimsBacked},
		{5, "An execution with an old generation changes nothing", d.oldGenerationsInert},
		{6, "Every refusal is visible: typed error, report count, log line", d.refusalsVisible},
		{10, "Billing survives crashes: every completed finalize billed exactly once, or visibly given up", d.billingSurvives},
	}
}

func (d *demo) billingSurvives(ctx context.Context) (bool, string, error) {
	var completed, confirmed, givenUp, pending, missing, wrong, bySweep int
	err := d.w.pool.QueryRow(ctx, `
		WITH v AS (
		    SELECT j.id::text AS job_id, s.state, s.attempts,
		           (SELECT count(*) FROM usage_ledger u WHERE u.job_id = j.id::text AND u.meter = $1) AS billed
		    FROM jobs j LEFT JOIN job_settlements s ON s.job_id = j.id::text AND s.generation = j.generation
		    WHERE j.type = 'video' AND j.status = 'COMPLETED')
		SELECT count(*),
		       count(*) FILTER (WHERE state = 'confirmed'),
		       count(*) FILTER (WHERE state = 'given_up'),
		       count(*) FILTER (WHERE state = 'pending'),
		       count(*) FILTER (WHERE state IS NULL),
		       count(*) FILTER (WHERE (state = 'confirmed' AND billed <> 1) OR (state = 'given_up' AND billed <> 0)
		                           OR (state = 'pending')),
		       count(*) FILTER (WHERE state = 'confirmed' AND attempts > 0)
		FROM v`, flow.MeterVideoSeconds).Scan(&completed, &confirmed, &givenUp, &pending, &missing, &wrong, &bySweep)
	if err != nil {
		return false, "", err
	}
	return missing == 0 && wrong == 0, fmt.Sprintf(
		"%d completed video finalizes: %d confirmed and billed once (%d of them by the settle sweep after their worker died), %d given up, %d pending; %d without a finalize record, %d billed otherwise",
		completed, confirmed, bySweep, givenUp, pending, missing, wrong), nil
}

// reclaimedPrefix is what the reclaimer writes as the failure reason.
const reclaimedPrefix = jobguard.ReclaimedReasonDefault

func (d *demo) failedStaysFailed(ctx context.Context) (bool, string, error) {
	var failed, retries, other int
	err := d.w.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE new_status = 'FAILED'),
		       count(*) FILTER (WHERE old_status = 'FAILED' AND new_status = 'QUEUED'
		                          AND new_generation = old_generation + 1 AND failure_reason IS NULL),
		       count(*) FILTER (WHERE old_status = 'FAILED' AND NOT (new_status = 'QUEUED'
		                          AND new_generation = old_generation + 1 AND failure_reason IS NULL))
		FROM job_transitions`).Scan(&failed, &retries, &other)
	if err != nil {
		return false, "", err
	}
	return other == 0, fmt.Sprintf("%d moves to FAILED; %d moves out of FAILED by Retry (QUEUED, generation+1, reason cleared); %d any other way",
		failed, retries, other), nil
}

func (d *demo) noOrphanProducts(ctx context.Context) (bool, string, error) {
	var chapters, lessons, lectures, readyCourses, readyVideos, readyAssets, exportsDone int
	var bad [7]int
	notDone := `j.status IS DISTINCT FROM 'COMPLETED'`
	err := d.w.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM chapters),
		       (SELECT count(*) FROM lessons),
		       (SELECT count(*) FROM lectures),
		       (SELECT count(*) FROM courses WHERE status = 'READY'),
		       (SELECT count(*) FROM videos WHERE status = 'READY'),
		       (SELECT count(*) FROM assets WHERE status = 'READY'),
		       (SELECT count(*) FROM documents WHERE export_status = 'DONE'),
		       (SELECT count(*) FROM chapters c LEFT JOIN jobs j ON j.id = c.job_id WHERE `+notDone+`),
		       (SELECT count(*) FROM lessons l JOIN chapters c ON c.id = l.chapter_id
		            LEFT JOIN jobs j ON j.id = c.job_id WHERE `+notDone+`),
		       (SELECT count(*) FROM lectures k JOIN lessons l ON l.id = k.lesson_id JOIN chapters c ON c.id = l.chapter_id
		            LEFT JOIN jobs j ON j.id = c.job_id WHERE `+notDone+`),
		       (SELECT count(*) FROM courses p WHERE status = 'READY' AND NOT EXISTS (SELECT 1 FROM jobs j
		            WHERE j.parent_id = p.id AND j.type = 'chapter' AND j.status = 'COMPLETED')),
		       (SELECT count(*) FROM videos p WHERE status = 'READY' AND NOT EXISTS (SELECT 1 FROM jobs j
		            WHERE j.parent_id = p.id AND j.type = 'video' AND j.status = 'COMPLETED')),
		       (SELECT count(*) FROM assets s LEFT JOIN jobs j ON j.id = s.job_id
		            WHERE s.status = 'READY' AND (`+notDone+` OR j.generation <> s.generation)),
		       (SELECT count(*) FROM documents p WHERE export_status = 'DONE' AND NOT EXISTS (SELECT 1 FROM jobs j
		            WHERE j.parent_id = p.id AND j.type = 'export' AND j.status = 'COMPLETED'))`).
		Scan(&chapters, &lessons, &lectures, &readyCourses, &readyVideos, &readyAssets, &exportsDone,
			&bad[0], &bad[1], &bad[2], &bad[3], &bad[4], &bad[5], &bad[6])
	if err != nil {
		return false, "", err
	}
	orphans := 0
	for _, n := range bad {
		orphans += n
	}
	return orphans == 0, fmt.Sprintf("%d chapters, %d lessons, %d lectures, %d READY courses, %d READY videos, %d READY assets, %d done exports; %d without a COMPLETED job",
		chapters, lessons, lectures, readyCourses, readyVideos, readyAssets, exportsDone, orphans), nil
}

func (d *demo) usageOnce(ctx context.Context) (bool, string, error) {
	var rows, stale, wrongCount, completed, badAccounts, billed int
	err := d.w.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM usage_ledger),
		       (SELECT count(*) FROM usage_ledger u LEFT JOIN jobs j ON j.id::text = u.job_id
		            WHERE j.status IS DISTINCT FROM 'COMPLETED' OR j.generation <> u.generation),
		       (SELECT count(*) FROM jobs j JOIN videos v ON v.id = j.parent_id
		            WHERE j.type = 'video' AND j.status = 'COMPLETED' AND v.status = 'READY'
		              AND (SELECT count(*) FROM usage_ledger u WHERE u.job_id = j.id::text AND u.meter = $1) <> 1),
		       (SELECT count(*) FROM jobs j WHERE j.type = 'video' AND j.status = 'COMPLETED'),
		       (SELECT count(*) FROM accounts a WHERE a.video_seconds <> (SELECT coalesce(sum(quantity), 0)
		            FROM usage_ledger u WHERE u.account = a.id AND u.meter = $1)),
		       (SELECT coalesce(sum(video_seconds), 0) FROM accounts)`, "video_seconds").
		Scan(&rows, &stale, &wrongCount, &completed, &badAccounts, &billed)
	if err != nil {
		return false, "", err
	}
	return stale == 0 && wrongCount == 0 && badAccounts == 0, fmt.Sprintf(
		"%d ledger rows for %d confirmed video jobs (%d with another count); %d rows for a job not COMPLETED at that generation; %d s billed, %d accounts off the ledger",
		rows, completed, wrongCount, stale, billed, badAccounts), nil
}

func (d *demo) reclaimsBacked(ctx context.Context) (bool, string, error) {
	w := d.w
	markers, unbacked := 0, 0
	iter := d.conns.Redis.Scan(ctx, 0, w.guard.Shared().Prefix+":reclaimed:*", 500).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		open, end := strings.IndexByte(key, '{'), strings.LastIndexByte(key, '}')
		if open < 0 || end < open {
			return false, "", fmt.Errorf("marker key %q has no hash tag", key)
		}
		jobID := key[open+1 : end]
		m, found, err := w.starts.Markers().Read(ctx, jobID)
		if err != nil {
			return false, "", err
		}
		if !found {
			continue // expired between the scan and the read
		}
		markers++
		var backed bool
		if err := w.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM job_transitions WHERE job_id::text = $1
			AND old_status IN ('QUEUED', 'PROCESSING') AND new_status = 'FAILED' AND new_generation = $2
			AND starts_with(failure_reason, $3))`, jobID, m.Generation, reclaimedPrefix).Scan(&backed); err != nil {
			return false, "", err
		}
		if !backed {
			unbacked++
		}
	}
	if err := iter.Err(); err != nil {
		return false, "", err
	}
	var reclaims, failedParents, orphanParents int
	err := w.pool.QueryRow(ctx, `
		WITH failed AS (
		    SELECT id, 'chapter' AS type FROM courses WHERE status = 'FAILED'
		    UNION ALL SELECT id, 'video' FROM videos WHERE status = 'FAILED'
		    UNION ALL SELECT id, 'export' FROM documents WHERE export_status = 'FAILED')
		SELECT (SELECT count(*) FROM job_transitions WHERE new_status = 'FAILED' AND starts_with(failure_reason, $1)),
		       (SELECT count(*) FROM failed),
		       (SELECT count(*) FROM failed p WHERE NOT EXISTS (SELECT 1 FROM jobs j
		            JOIN job_transitions t ON t.job_id = j.id
		            WHERE j.parent_id = p.id AND j.type = p.type AND t.new_status = 'FAILED'
		              AND starts_with(t.failure_reason, $1)))`, reclaimedPrefix).
		Scan(&reclaims, &failedParents, &orphanParents)
	if err != nil {
		return false, "", err
	}
	reported, lost := 0, 0
	d.mu.Lock()
	for _, r := range d.reports {
		reported += r.Reclaimed
		lost += r.LostRace
	}
	d.mu.Unlock()
	held := unbacked == 0 && orphanParents == 0 && reported == reclaims
	return held, fmt.Sprintf("%d reclaims written (%d reported); %d markers, %d not backed by a reclaim at their generation; %d FAILED parents, %d without a reclaimed job; %d lost races reported",
		reclaims, reported, markers, unbacked, failedParents, orphanParents, lost), nil
}

func (d *demo) oldGenerationsInert(ctx context.Context) (bool, string, error) {
	var old, oldOpen, staleRows, badKept int
	err := d.w.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM job_artifacts a JOIN jobs j ON j.id::text = a.job_id WHERE a.generation <> j.generation),
		       (SELECT count(*) FROM job_artifacts a JOIN jobs j ON j.id::text = a.job_id
		            WHERE a.generation <> j.generation AND a.state <> 'done'),
		       (SELECT count(*) FROM chapters c JOIN jobs j ON j.id = c.job_id WHERE c.generation <> j.generation)
		     + (SELECT count(*) FROM assets s JOIN jobs j ON j.id = s.job_id WHERE s.generation <> j.generation)
		     + (SELECT count(*) FROM usage_ledger u JOIN jobs j ON j.id::text = u.job_id WHERE u.generation <> j.generation),
		       (SELECT count(*) FROM job_artifacts a JOIN jobs j ON j.id::text = a.job_id
		            WHERE a.state = 'kept' AND (a.generation <> j.generation OR j.status <> 'COMPLETED'))`).
		Scan(&old, &oldOpen, &staleRows, &badKept)
	if err != nil {
		return false, "", err
	}
	return oldOpen == 0 && staleRows == 0 && badKept == 0, fmt.Sprintf(
		"%d artifacts of old generations, %d of them not compensated; %d chapter, asset or ledger rows of an old generation; %d kept artifacts of an unfinished execution",
		old, oldOpen, staleRows, badKept), nil
}

func (d *demo) refusalsVisible(ctx context.Context) (bool, string, error) {
	reclaimed, err := d.reclaimedExecutions(ctx)
	if err != nil {
		return false, "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var missing []string
	for _, x := range reclaimed {
		missing = append(missing, d.reclaimUnseen(x)...)
	}
	refusals, unseen := d.refusalsUnseen()
	missing = append(missing, unseen...)
	detail := fmt.Sprintf("%d reclaims, each in a sweep report, a log line and an ErrJobTerminal to its execution (its work cancelled, or its write refused); %d refusals, each typed and logged",
		len(reclaimed), refusals)
	if len(missing) > 0 {
		detail += "; missing: " + strings.Join(missing, "; ")
	}
	return len(missing) == 0, detail, nil
}

// reclaimedExec is an execution a sweep reclaimed: its job and the
// generation it ran.
type reclaimedExec struct {
	id  string
	gen int64
}

// reclaimedExecutions reads the executions the sweeps reclaimed from the
// transitions' history.
func (d *demo) reclaimedExecutions(ctx context.Context) ([]reclaimedExec, error) {
	rows, err := d.w.pool.Query(ctx, `SELECT job_id::text, new_generation FROM job_transitions
		WHERE new_status = 'FAILED' AND starts_with(failure_reason, $1)`, reclaimedPrefix)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (reclaimedExec, error) {
		var x reclaimedExec
		return x, row.Scan(&x.id, &x.gen)
	})
}

// reclaimUnseen says where the reclaim of x is missing: a sweep report, a
// log line, and an ErrJobTerminal to its execution (its work cancelled,
// or its guarded write refused). d.mu is held.
func (d *demo) reclaimUnseen(x reclaimedExec) []string {
	var missing []string
	inReport := false
	for _, r := range d.reports {
		inReport = inReport || slices.Contains(r.ReclaimedIDs, x.id)
	}
	if !inReport {
		missing = append(missing, short(x.id)+": no sweep report")
	}
	if len(d.logs.find("reclaim: job reclaimed", x.id)) == 0 {
		missing = append(missing, short(x.id)+": no reclaim log line")
	}
	told := false
	for _, err := range d.refusals[x.id] {
		var se *jobguard.StateError
		var lost *watch.LostError
		told = told || (errors.As(err, &se) && errors.Is(err, jobguard.ErrJobTerminal) && se.Want == x.gen) ||
			(errors.As(err, &lost) && errors.Is(err, jobguard.ErrJobTerminal) && lost.Generation == x.gen)
	}
	if !told {
		missing = append(missing, fmt.Sprintf("%s: execution %d was neither cancelled nor refused with ErrJobTerminal", short(x.id), x.gen))
	}
	return missing
}

// refusalsUnseen counts the refusals, and says which is untyped or not
// logged. d.mu is held.
func (d *demo) refusalsUnseen() (int, []string) {
	var missing []string
	refusals := 0
	for id, errs := range d.refusals {
		refusals += len(errs)
		for _, err := range errs {
			if !jobguard.IsPermanent(err) {
				missing = append(missing, fmt.Sprintf("%s: untyped error %v", short(id), err))
			}
		}
		if n := len(d.logs.find("worker: job refused; not retried", id)); n < len(errs) {
			missing = append(missing, fmt.Sprintf("%s: %d refusals, %d log lines", short(id), len(errs), n))
		}
	}
	return refusals, missing
}
