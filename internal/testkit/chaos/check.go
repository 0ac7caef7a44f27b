package chaos

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/testkit/history"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// Violation is one broken invariant with the rows that show it.
type Violation struct {
	// Invariant is the number of the library invariant broken (0: the run did not
	// finish its jobs).
	Invariant int
	// What says what was found.
	What string
	// Count is how many rows show it; Rows holds the first few.
	Count int
	// Rows are the first rows (at most five) as JSON.
	Rows []string
}

// String prints the violation with its rows, one per line.
func (v Violation) String() string {
	return fmt.Sprintf("invariant %d: %s (%d rows)\n  %s", v.Invariant, v.What, v.Count, strings.Join(v.Rows, "\n  "))
}

// Reported is what the reclaimers' reports said, to be compared with what
// the database recorded.
type Reported struct {
	Reclaimed, Rescued, LostRace, MarkerErrors, SweepErrors int
	// MarkerUnsure holds the ids reclaimed by sweeps whose marker write
	// failed (Redis was down): their marker may be missing.
	MarkerUnsure map[string]bool
}

// query is one invariant check: every row it returns is a violation.
type query struct {
	inv  int
	what string
	sql  string
}

var checks = []query{
	{1, "a job left FAILED other than through Retry (FAILED → QUEUED, new generation)", `
		SELECT * FROM job_audit WHERE old_status = 'FAILED' AND new_status <> 'FAILED'
		  AND NOT (actor = 'retry' AND new_status = 'QUEUED' AND new_gen > old_gen)`},
	{1, "a COMPLETED job changed status or generation", `
		SELECT * FROM job_audit WHERE old_status = 'COMPLETED' AND (new_status <> 'COMPLETED' OR new_gen <> old_gen)`},
	{1, "a retry of a job that was not FAILED", `
		SELECT * FROM job_audit WHERE actor = 'retry' AND old_status <> 'FAILED'`},

	{2, "a chapter of a job that is not COMPLETED at the chapter's generation", `
		SELECT c.*, j.status, j.generation AS job_generation FROM chapters c JOIN jobs j ON j.id = c.job_id
		WHERE j.status <> 'COMPLETED' OR j.generation <> c.generation`},
	{2, "a lesson of a job that is not COMPLETED at the lesson's generation", `
		SELECT l.*, j.status, j.generation AS job_generation FROM lessons l JOIN jobs j ON j.id = l.job_id
		WHERE j.status <> 'COMPLETED' OR j.generation <> l.generation`},
	{2, "a chapter written outside the transaction that completed its job", `
		SELECT c.* FROM chapters c WHERE NOT EXISTS (
			SELECT 1 FROM job_audit a WHERE a.job_id = c.job_id AND a.txid = c.txid
			  AND a.new_status = 'COMPLETED' AND a.new_gen = c.generation)`},
	{2, "a READY course whose chapter job is not COMPLETED", `
		SELECT co.*, j.id AS job_id, j.status AS job_status FROM courses co JOIN jobs j ON j.parent_id = co.id
		WHERE co.status = 'READY' AND j.status <> 'COMPLETED'`},
	{2, "a course whose week count is not three per chapter job completed (rows landed twice or partly)", `
		WITH ch AS (SELECT course_id, count(*) AS n FROM chapters GROUP BY course_id),
		     le AS (SELECT c.course_id, count(*) AS n FROM lessons l JOIN chapters c ON c.id = l.chapter_id GROUP BY c.course_id),
		     done AS (SELECT parent_id, count(*) AS n FROM jobs WHERE status = 'COMPLETED' GROUP BY parent_id)
		SELECT co.*, coalesce(ch.n, 0) AS chapters, coalesce(le.n, 0) AS lessons, coalesce(done.n, 0) AS completed_jobs
		FROM courses co LEFT JOIN ch ON ch.course_id = co.id LEFT JOIN le ON le.course_id = co.id
		LEFT JOIN done ON done.parent_id = co.id
		WHERE co.weeks <> coalesce(ch.n, 0) OR co.weeks <> 3 * coalesce(done.n, 0) OR 2 * co.weeks <> coalesce(le.n, 0)`},
	{2, "a READY video whose job is not COMPLETED", `
		SELECT v.*, j.id AS job_id, j.status AS job_status FROM videos v JOIN jobs j ON j.parent_id = v.id
		WHERE v.status = 'READY' AND j.status <> 'COMPLETED'`},

	{3, "a usage ledger row without a confirmed finalize record of that execution", `
		SELECT l.* FROM usage_ledger l
		WHERE NOT EXISTS (SELECT 1 FROM job_settlements s
		    WHERE s.job_id = l.job_id AND s.generation = l.generation AND s.state = 'confirmed')`},
	{3, "a completed video job without its finalize record (written with the completion)", `
		SELECT j.id, j.generation FROM jobs j
		WHERE j.type = 'video' AND j.status = 'COMPLETED' AND NOT EXISTS (
		    SELECT 1 FROM job_settlements s WHERE s.job_id = j.id::text AND s.generation = j.generation)`},
	{3, "a finalize record of an execution that did not complete its job", `
		SELECT s.job_id, s.generation, s.state, j.status, j.generation AS job_generation FROM job_settlements s
		LEFT JOIN jobs j ON j.id = s.job_id::uuid
		WHERE j.id IS NULL OR j.status <> 'COMPLETED' OR j.generation <> s.generation`},
	{3, "a finalize record still pending after the run settled", `
		SELECT job_id, generation, pending, attempts, last_error FROM job_settlements WHERE state = 'pending'`},
	{3, "a confirmed finalize record whose metadata did not catch up", `
		SELECT s.job_id, v.id AS video, v.status, v.asset_ok, c.published FROM job_settlements s
		JOIN jobs j ON j.id = s.job_id::uuid JOIN videos v ON v.id = j.parent_id
		LEFT JOIN contents c ON c.video_id = v.id
		WHERE s.state = 'confirmed' AND (v.status <> 'READY' OR (NOT coalesce((j.payload->>'no_updates')::boolean, false)
		  AND (NOT v.asset_ok OR c.published IS NOT TRUE)))`},
	{3, "a given-up finalize record that was billed", `
		SELECT s.job_id, s.generation, l.quantity FROM job_settlements s
		JOIN usage_ledger l ON l.job_id = s.job_id WHERE s.state = 'given_up'`},
	{3, "a finalize record given up although its updates could succeed", `
		SELECT s.job_id, s.attempts, s.last_error FROM job_settlements s JOIN jobs j ON j.id = s.job_id::uuid
		WHERE s.state = 'given_up' AND NOT coalesce((j.payload->>'fail_for_good')::boolean, false)`},
	{3, "a usage ledger row for a job not COMPLETED at the ledger's generation", `
		SELECT l.*, j.status, j.generation AS job_generation FROM usage_ledger l LEFT JOIN jobs j ON j.id = l.job_id::uuid
		WHERE j.id IS NULL OR j.status <> 'COMPLETED' OR j.generation <> l.generation`},
	{3, "a usage ledger row for an execution whose completion was rejected", `
		SELECT l.*, e.kind, e.detail FROM usage_ledger l JOIN events e ON e.job_id = l.job_id::uuid AND e.generation = l.generation
		WHERE e.kind IN ('late_rejected', 'stale_refused', 'other_rejected')`},
	{3, "a completed video finalize not billed exactly once, nor visibly given up (whether or not its worker was killed)", unbilled},
	{3, "a job confirmed more than once", `
		SELECT job_id, count(*) FROM confirmed GROUP BY job_id HAVING count(*) > 1`},
	{3, "an account billed other than the sum of its ledger rows", `
		SELECT a.*, coalesce(s.total, 0) AS ledger_total FROM accounts a
		LEFT JOIN (SELECT account, sum(quantity) AS total FROM usage_ledger GROUP BY account) s ON s.account = a.id
		WHERE a.video_ms <> coalesce(s.total, 0)`},

	{4, "a parent failed in a transaction that reclaimed none of its jobs", `
		SELECT p.* FROM parent_audit p WHERE p.new_status = 'FAILED' AND NOT EXISTS (
			SELECT 1 FROM job_audit a WHERE a.txid = p.txid AND a.actor = 'reclaim' AND a.parent_id = p.parent_id)`},
	{4, "a reclaimed job whose parent was not failed in the same transaction", `
		SELECT a.* FROM job_audit a WHERE a.actor = 'reclaim' AND NOT EXISTS (
			SELECT 1 FROM parent_audit p WHERE p.txid = a.txid AND p.parent_id = a.parent_id AND p.new_status = 'FAILED')`},
	{4, "a parent change no writer of the run claims", `
		SELECT * FROM parent_audit WHERE actor IS NULL`},

	{5, "a worker write at a generation other than the row's", `
		SELECT * FROM job_audit WHERE actor = 'worker'
		  AND (writer_gen IS NULL OR writer_gen <> old_gen OR new_gen <> old_gen OR old_status NOT IN ('QUEUED', 'PROCESSING'))`},
	{5, "a start that did not move an active, unreclaimed job to PROCESSING at the next generation", `
		SELECT * FROM job_audit WHERE actor = 'start'
		  AND (old_status NOT IN ('QUEUED', 'PROCESSING') OR new_status <> 'PROCESSING' OR new_gen <> old_gen + 1
		       OR coalesce(new_reason, '') LIKE 'reclaimed%')`},
	{5, "a reclaim that did not fail an active job at its generation", `
		SELECT * FROM job_audit WHERE actor = 'reclaim'
		  AND (old_status NOT IN ('QUEUED', 'PROCESSING') OR new_status <> 'FAILED' OR new_gen <> old_gen
		       OR coalesce(new_reason, '') NOT LIKE 'reclaimed%')`},
	{5, "a call cancelled by a notice although no reclaim, rescue or cancel took its generation or a later one", `
		SELECT e.* FROM events e WHERE e.kind = 'cancelled' AND e.detail = 'notice' AND NOT EXISTS (
			SELECT 1 FROM job_audit a WHERE a.job_id = e.job_id AND a.actor IN ('reclaim', 'rescue', 'cancel')
			  AND a.old_gen >= e.generation)`},
	{5, "a call cancelled by the watcher's check while its job was still its own", `
		SELECT e.* FROM events e WHERE e.kind = 'cancelled' AND e.detail = 'check' AND NOT EXISTS (
			SELECT 1 FROM job_audit a WHERE a.job_id = e.job_id
			  AND ((a.actor = 'reclaim' AND a.old_gen >= e.generation) OR a.new_gen > e.generation))`},
	{5, "a write to a job that no writer of the run claims", `
		SELECT * FROM job_audit WHERE actor IS NULL OR actor NOT IN ('start', 'worker', 'reclaim', 'retry', 'rescue', 'cancel')`},

	{6, "a completion reported rejected that was written", `
		SELECT e.*, a.seq AS audit_seq FROM events e
		JOIN job_audit a ON a.job_id = e.job_id AND a.new_status = 'COMPLETED' AND a.old_status <> 'COMPLETED' AND a.new_gen = e.generation
		WHERE e.kind IN ('late_rejected', 'stale_refused')`},
	{6, "a completion reported written that is not in the history", `
		SELECT e.* FROM events e WHERE e.kind = 'completed' AND NOT EXISTS (
			SELECT 1 FROM job_audit a WHERE a.job_id = e.job_id AND a.new_status = 'COMPLETED'
			  AND a.old_status <> 'COMPLETED' AND a.new_gen = e.generation)`},

	{6, "a reclaimed, rescued or cancelled execution that saved, lived on and was not told with a typed refusal", `
		SELECT a.job_id, a.actor, a.old_gen, a.txid, s.incarnation, s.at AS saving_at FROM job_audit a
		JOIN events s ON s.job_id = a.job_id AND s.generation = a.old_gen AND s.kind = 'saving'
		WHERE a.actor IN ('reclaim', 'rescue', 'cancel') AND s.at > a.at
		  AND s.incarnation NOT IN (SELECT incarnation FROM kills)
		  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.job_id = a.job_id AND e.generation = a.old_gen
			AND e.kind IN ('late_rejected', 'stale_refused', 'other_rejected', 'save_error'))`},

	{5, "a rescue that did not send a running, owned job back to QUEUED at the next generation with the rescue's reason and no owner", `
		SELECT * FROM job_audit WHERE actor = 'rescue'
		  AND (old_status <> 'PROCESSING' OR new_status <> 'QUEUED' OR new_gen <> old_gen + 1 OR old_owner IS NULL
		       OR new_owner IS NOT NULL OR coalesce(new_reason, '') <> '` + jobguard.RescuedReasonDefault + `')`},
	{5, "a cancel that did not fail an active job at the next generation with the operator's reason", `
		SELECT * FROM job_audit WHERE actor = 'cancel'
		  AND (old_status NOT IN ('QUEUED', 'PROCESSING') OR new_status <> 'FAILED' OR new_gen <> old_gen + 1
		       OR coalesce(new_reason, '') NOT LIKE '` + jobguard.CancelledReasonDefault + `%')`},
	{5, "a write by a rescued or cancelled execution after its job was taken", `
		SELECT w.*, a.actor AS taken_by, a.seq AS taken_seq FROM job_audit a
		JOIN job_audit w ON w.job_id = a.job_id AND w.seq > a.seq AND w.actor = 'worker' AND w.writer_gen <= a.old_gen
		WHERE a.actor IN ('rescue', 'cancel')`},

	{16, "a job rescued while its owner's lease was live (the lease's last expiry is after the rescue, on the database's clock)", `
		SELECT a.job_id, a.old_owner, a.at AS rescued_at, w.expires_at, w.renewed_at FROM job_audit a
		LEFT JOIN jobguard_workers w ON w.id = a.old_owner
		WHERE a.actor = 'rescue' AND (w.id IS NULL OR w.expires_at > a.at)`},
	{16, "a job rescued from a worker the run neither killed nor stopped, and that never said it lost its lease", `
		SELECT a.job_id, a.old_owner, a.at FROM job_audit a WHERE a.actor = 'rescue'
		  AND a.old_owner NOT IN (SELECT 'w' || incarnation FROM kills UNION ALL SELECT 'w' || incarnation FROM stops
		                          UNION ALL SELECT 'w' || incarnation FROM events WHERE kind = 'lease_lost')`},
	{16, "a rescued job that neither completed nor failed afterwards", `
		SELECT a.job_id, a.new_gen, j.status, j.generation FROM job_audit a JOIN jobs j ON j.id = a.job_id
		WHERE a.actor = 'rescue' AND j.status <> 'COMPLETED' AND NOT EXISTS (
			SELECT 1 FROM job_audit f WHERE f.job_id = a.job_id AND f.seq > a.seq AND f.new_status = 'FAILED')`},
	{16, "a rescued job completed by the worker it was rescued from", `
		SELECT c.job_id, c.new_gen, s.new_owner FROM job_audit a
		JOIN job_audit c ON c.job_id = a.job_id AND c.seq > a.seq AND c.new_status = 'COMPLETED' AND c.old_status <> 'COMPLETED'
		JOIN job_audit s ON s.job_id = c.job_id AND s.actor = 'start' AND s.new_gen = c.new_gen
		WHERE a.actor = 'rescue' AND s.new_owner IS NOT DISTINCT FROM a.old_owner`},

	{1, "a cancelled job completed with no Retry between the cancel and the completion", `
		SELECT c.* FROM job_audit a
		JOIN job_audit c ON c.job_id = a.job_id AND c.seq > a.seq AND c.new_status = 'COMPLETED' AND c.old_status <> 'COMPLETED'
		WHERE a.actor = 'cancel' AND NOT EXISTS (
			SELECT 1 FROM job_audit r WHERE r.job_id = a.job_id AND r.actor = 'retry' AND r.seq > a.seq AND r.seq < c.seq)`},
	{2, "a product row or READY parent of a job whose last cancel no Retry reopened", `
		SELECT x.* FROM (SELECT 'chapter' AS kind, job_id FROM chapters UNION ALL SELECT 'lesson', job_id FROM lessons
		    UNION ALL SELECT 'course', j.id FROM courses co JOIN jobs j ON j.parent_id = co.id WHERE co.status = 'READY'
		    UNION ALL SELECT 'video', j.id FROM videos v JOIN jobs j ON j.parent_id = v.id WHERE v.status = 'READY') x
		WHERE x.job_id IN (` + cancelledForGood + `)`},
	{3, "a finalize record or a usage ledger row of a job whose last cancel no Retry reopened", `
		SELECT 'settlement' AS kind, job_id, generation FROM job_settlements WHERE job_id::uuid IN (` + cancelledForGood + `)
		UNION ALL SELECT 'ledger', job_id, generation FROM usage_ledger WHERE job_id::uuid IN (` + cancelledForGood + `)`},

	{0, "a job still active after the queue drained", `
		SELECT id, type, status, generation, failure_reason FROM jobs
		WHERE status IN ('QUEUED', 'PROCESSING') AND NOT EXISTS (SELECT 1 FROM queue q WHERE q.job_id = jobs.id)`},
}

// cancelledForGood lists the jobs an operator cancelled last, with no
// Retry after the cancel.
const cancelledForGood = `
	SELECT a.job_id FROM job_audit a WHERE a.actor = 'cancel' AND NOT EXISTS (
		SELECT 1 FROM job_audit r WHERE r.job_id = a.job_id AND r.actor = 'retry' AND r.seq > a.seq)`

// unbilled lists the video jobs whose completion committed and whose usage
// is not in the ledger exactly once: a worker killed between its completion
// and its billing, or a finalize whose metadata update failed, must still
// be billed once the run has settled, unless its record was given up,
// which is visible (and checked: only for a store that refuses for good).
const unbilled = `
	SELECT j.id, j.generation, (SELECT count(*) FROM usage_ledger l
	    WHERE l.job_id = j.id::text AND l.meter = 'video_ms') AS ledger_rows
	FROM jobs j
	WHERE j.type = 'video' AND j.status = 'COMPLETED'
	  AND (SELECT count(*) FROM usage_ledger l WHERE l.job_id = j.id::text AND l.meter = 'video_ms') <> 1
	  AND NOT EXISTS (SELECT 1 FROM job_settlements s
	      WHERE s.job_id = j.id::text AND s.generation = j.generation AND s.state = 'given_up')`

// Unbilled is the query of completed video finalizes not billed exactly
// once, for the run's table.
const Unbilled = `SELECT count(*) FROM (` + unbilled + `) u`

// KilledAfterCompletion counts the finalize records whose worker never
// returned from Finalize (no completed event for its execution): killed
// after the completion and its record committed, before the worker could
// say so.
const KilledAfterCompletion = `SELECT count(*) FROM job_settlements s WHERE NOT EXISTS (
	SELECT 1 FROM events e WHERE e.job_id = s.job_id::uuid AND e.generation = s.generation AND e.kind = 'completed')`

// FinalState reads the run's final state for the history checker: the
// jobs, the product rows and READY parents, the finalize records and the
// ledger.
var FinalState = history.Queries{
	Jobs: `SELECT id::text, status, generation FROM jobs`,
	Products: `SELECT 'chapters', id::text, job_id::text, generation FROM chapters
		UNION ALL SELECT 'lessons', id::text, job_id::text, generation FROM lessons`,
	Ready: `SELECT 'courses', co.id, j.id::text, 0::bigint FROM courses co JOIN jobs j ON j.parent_id = co.id WHERE co.status = 'READY'
		UNION ALL SELECT 'videos', v.id, j.id::text, 0::bigint FROM videos v JOIN jobs j ON j.parent_id = v.id WHERE v.status = 'READY'`,
	Settlements: `SELECT job_id, generation, state FROM job_settlements`,
	Ledger:      `SELECT job_id, generation, meter FROM usage_ledger`,
}

// Check runs every invariant against the database and the markers: in
// rdb, or, when rdb is nil (a Postgres-only run), in the marker table.
func Check(ctx context.Context, db jobguard.DB, rdb *redis.Client, markerPrefix string, rep Reported) ([]Violation, error) {
	var out []Violation
	for _, c := range checks {
		v, err := rows(ctx, db, c)
		if err != nil {
			return nil, fmt.Errorf("chaos: check %q: %w", c.what, err)
		}
		if v != nil {
			out = append(out, *v)
		}
	}

	for _, c := range []struct {
		actor, what string
		reported    int
	}{{"reclaim", "reclaims", rep.Reclaimed}, {"rescue", "rescues", rep.Rescued}} {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM job_audit WHERE actor = $1`, c.actor).Scan(&n); err != nil {
			return nil, fmt.Errorf("chaos: check: %w", err)
		}
		// A sweep that failed (its connection terminated as it committed)
		// may have reclaimed or rescued jobs it never reported.
		if n < c.reported || (rep.SweepErrors == 0 && n != c.reported) {
			out = append(out, Violation{Invariant: 6, What: c.what + " in the history differ from the reclaimers' reports",
				Count: 1, Rows: []string{fmt.Sprintf("history %d, reports %d", n, c.reported)}})
		}
	}

	mv, err := checkMarkers(ctx, db, rdb, markerPrefix, rep)
	if err != nil {
		return nil, err
	}
	return append(out, mv...), nil
}

func rows(ctx context.Context, db jobguard.DB, c query) (*Violation, error) {
	r, err := db.Query(ctx, `SELECT count(*) OVER (), row_to_json(x)::text FROM (`+c.sql+`) x LIMIT 5`)
	if err != nil {
		return nil, err
	}
	var n int
	var row string
	var v *Violation
	_, err = pgx.ForEachRow(r, []any{&n, &row}, func() error {
		if v == nil {
			v = &Violation{Invariant: c.inv, What: c.what, Count: n}
		}
		v.Rows = append(v.Rows, row)
		return nil
	})
	return v, err
}

// markerKey finds the job id, the hash tag, in a marker's key.
var markerKey = regexp.MustCompile(`:reclaimed:\{([^}]*)\}`)

// markerFinds collects what the comparison of markers with reclaims finds.
type markerFinds struct {
	stray, missing, unreadable Violation
}

func newMarkerFinds() *markerFinds {
	return &markerFinds{
		stray:      Violation{Invariant: 4, What: "a marker without a reclaim of its generation in the history"},
		missing:    Violation{Invariant: 4, What: "a reclaim whose marker is missing although its sweep reported no marker error"},
		unreadable: Violation{Invariant: 4, What: "a marker that cannot be read"},
	}
}

func (f *markerFinds) add(v *Violation, row string) {
	v.Count++
	if len(v.Rows) < 5 {
		v.Rows = append(v.Rows, row)
	}
}

func (f *markerFinds) violations() []Violation {
	var out []Violation
	for _, v := range []Violation{f.stray, f.missing, f.unreadable} {
		if v.Count > 0 {
			out = append(out, v)
		}
	}
	return out
}

// checkMarkers compares the markers with the reclaims in the history: a
// marker for every reclaim (unless its sweep reported that Redis refused
// the write), and no marker without a reclaim of that generation
// (invariant 4: a lost race writes none). The markers are read from Redis,
// or, when rdb is nil (a Postgres-only run), from the marker table, where
// a marker commits with its reclaim: there no reclaim may lack one.
func checkMarkers(ctx context.Context, db jobguard.DB, rdb *redis.Client, prefix string, rep Reported) ([]Violation, error) {
	reclaimed, err := reclaimedGenerations(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("chaos: check markers: %w", err)
	}
	finds := newMarkerFinds()
	var found map[string]int64
	if rdb == nil {
		found, err = tableMarkers(ctx, db, finds, reclaimed)
	} else {
		found, err = redisMarkers(ctx, db, rdb, prefix, finds, reclaimed)
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: check markers: %w", err)
	}
	for id, gens := range reclaimed {
		for g := range gens {
			if mg, ok := found[id]; (!ok || mg < g) && !rep.MarkerUnsure[id] {
				finds.add(&finds.missing, fmt.Sprintf("job %s reclaimed at generation %d; marker %v", id, g, markerDesc(mg, ok)))
			}
		}
	}
	return finds.violations(), nil
}

// reclaimedGenerations reads the history's reclaims: job id → the
// generations reclaimed.
func reclaimedGenerations(ctx context.Context, db jobguard.DB) (map[string]map[int64]bool, error) {
	reclaimed := map[string]map[int64]bool{}
	r, err := db.Query(ctx, `SELECT job_id::text, old_gen FROM job_audit WHERE actor = 'reclaim'`)
	if err != nil {
		return nil, err
	}
	var id string
	var gen int64
	_, err = pgx.ForEachRow(r, []any{&id, &gen}, func() error {
		if reclaimed[id] == nil {
			reclaimed[id] = map[int64]bool{}
		}
		reclaimed[id][gen] = true
		return nil
	})
	return reclaimed, err
}

// redisMarkers reads the run's markers in Redis (job id → generation),
// noting a stray or unreadable one in finds.
func redisMarkers(ctx context.Context, db jobguard.DB, rdb *redis.Client, prefix string, finds *markerFinds,
	reclaimed map[string]map[int64]bool) (map[string]int64, error) {
	guard, err := jobguard.NewWithConfig(ctx, db, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: jobguard.Shared{Prefix: prefix, Markers: jobguard.MarkersRedis}})
	if err != nil {
		return nil, err
	}
	store, err := marker.NewRedisStore(guard, rdb, marker.Config{})
	if err != nil {
		return nil, err
	}
	found := map[string]int64{}
	iter := rdb.Scan(ctx, 0, prefix+":reclaimed:*", 1000).Iterator()
	for iter.Next(ctx) {
		m := markerKey.FindStringSubmatch(iter.Val())
		if m == nil || store.Key(m[1]) != iter.Val() {
			continue // no marker of the run's jobs table
		}
		mk, ok, err := store.Read(ctx, m[1])
		if err != nil || !ok {
			finds.add(&finds.unreadable, fmt.Sprintf("%s: %v", iter.Val(), err))
			continue
		}
		found[m[1]] = mk.Generation
		finds.stray1(m[1], mk.Generation, mk.Reason, reclaimed)
	}
	return found, iter.Err()
}

// tableMarkers reads the run's markers in the marker table (job id →
// generation), expired ones included, noting a stray one in finds. It
// reads the table with its own query, sharing no code with the store that
// wrote it.
func tableMarkers(ctx context.Context, db jobguard.DB, finds *markerFinds, reclaimed map[string]map[int64]bool) (map[string]int64, error) {
	// The run's jobs table, named as the store names it: its schema (the
	// search_path's) and name, each in double quotes.
	r, err := db.Query(ctx, `SELECT job_id, generation, reason FROM job_reclaim_markers
		WHERE jobs_table = '"' || current_schema() || '"."jobs"'`)
	if err != nil {
		return nil, err
	}
	found := map[string]int64{}
	var id, reason string
	var gen int64
	_, err = pgx.ForEachRow(r, []any{&id, &gen, &reason}, func() error {
		found[id] = gen
		finds.stray1(id, gen, reason, reclaimed)
		return nil
	})
	return found, err
}

// stray1 notes the marker of job id at gen if no reclaim of that
// generation is in the history.
func (f *markerFinds) stray1(id string, gen int64, reason string, reclaimed map[string]map[int64]bool) {
	if !reclaimed[id][gen] {
		f.add(&f.stray, fmt.Sprintf("job %s marker generation %d reason %q; reclaimed generations %v",
			id, gen, reason, keys(reclaimed[id])))
	}
}

func keys(m map[int64]bool) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	return out
}

func markerDesc(gen int64, ok bool) string {
	if !ok {
		return "none"
	}
	return "at generation " + strconv.FormatInt(gen, 10)
}
