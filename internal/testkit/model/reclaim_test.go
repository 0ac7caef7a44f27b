package model

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// queueSource lists what a queue believes is running: the model's
// PROCESSING jobs, each spelled some valid way, with their start on the
// queue's clock, and, when asked, listings of attempts the rows no longer
// run (a job retried or restarted since).
type queueSource struct {
	listings []reclaim.ActiveJob
}

func (s *queueSource) Active(_ context.Context, _ reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	return page(s.listings)
}

// reclaimerKey selects one of a world's reclaimers: over the queue or the
// table, with Redis unreachable, with its notices dropped, under a brake
// whose caps a sequence reaches (brakeCaps).
type reclaimerKey struct{ queue, down, deaf, brake bool }

// brakeCaps is the brake of the braking reclaimers: one job of a type and
// two in all per sweep. The share caps, never below their floor of 20,
// stay out of reach.
var brakeCaps = reclaim.Brake{MaxJobs: 2, MaxJobsPerType: 1}

// reclaimers builds the world's reclaimers: over the table itself or over
// the queue, with Redis reachable or not. Their clock is the model's
// reclaimer clock, offset from the wall clock.
func (w *world) reclaimers() (map[reclaimerKey]*reclaim.Reclaimer, *queueSource, error) {
	src := &queueSource{}
	rules := map[string]reclaim.ParentRule{}
	if w.table.ParentIDColumn != "" {
		rule, err := reclaim.SetParent(reclaim.ParentUpdate{Table: "parents", Column: "status", Value: parentFailed,
			From: []string{parentGenerating}})
		if err != nil {
			return nil, nil, err
		}
		rules["chapter"] = rule
		// The video rule fails, or panics, for a poisoned job: one failing
		// rule must not stop the other reclaims.
		rules["video"] = func(ctx context.Context, tx pgx.Tx, jobs []jobset.Job) error {
			w.mu.Lock()
			bad := ""
			for _, j := range jobs {
				if w.poisoned[j.ID] {
					bad = j.ID
				}
			}
			w.mu.Unlock()
			switch {
			case bad != "" && len(bad)%2 == 0:
				panic("parent rule panicked on " + bad)
			case bad != "":
				return fmt.Errorf("parent of %s refused the write", bad)
			}
			return rule(ctx, tx, jobs)
		}
	}
	out := map[reclaimerKey]*reclaim.Reclaimer{}
	for _, k := range []reclaimerKey{{false, false, false, false}, {false, true, false, false}, {true, false, false, false},
		{true, true, false, false}, {false, false, true, false}, {true, false, true, false}, {false, false, false, true},
		{true, false, false, true}} {
		if !k.queue && w.table.StartedAtColumn == "" {
			continue
		}
		cfg := reclaim.Config{
			Guard: w.guard, DB: w.env.Pool, Redis: w.env.Redis, Limits: w.limits, NoProgress: noProgress,
			OnReclaim: rules, LivenessTimeout: 300 * time.Millisecond, SweepTimeout: 30 * time.Second, Logger: quiet,
			Now: func() time.Time { return time.Now().Add(w.cur.ref.clocks[2]) },
		}
		if k.down {
			cfg.Redis = w.down
		}
		if w.notices != nil && !k.deaf {
			cfg.Notices = w.notices // a deaf reclaimer's notices are dropped
		}
		if k.queue {
			cfg.Source = src
		}
		if k.brake {
			cfg.Brake = brakeCaps
		}
		if w.table.OwnerColumn != "" {
			cfg.Workers = &lease.Workers{} // the test's schema, through search_path
		}
		r, err := reclaim.New(cfg)
		if err != nil {
			return nil, nil, err
		}
		out[k] = r
	}
	return out, src, nil
}

// reclaim runs one reclaim sweep, with some job rows and parents held by
// idle transactions for its length.
func (m *machine) reclaim(rt *rapid.T) {
	w := m.w
	queue := w.table.StartedAtColumn == "" || rapid.Bool().Draw(rt, "queue")
	stale := queue && rapid.Bool().Draw(rt, "stale listings")
	dropped := w.notices != nil && rapid.IntRange(0, 3).Draw(rt, "notice dropped") == 0
	heldRows := map[*job]bool{}
	heldParents := map[*job]bool{}
	for _, j := range m.ref.jobs {
		if rapid.IntRange(0, 5).Draw(rt, "hold row") == 5 {
			heldRows[j] = true
		}
		if w.table.ParentIDColumn != "" && rapid.IntRange(0, 5).Draw(rt, "hold parent") == 5 {
			heldParents[j] = true
		}
	}
	// The listings, spelled before the sweep asks for them.
	var listings []reclaim.ActiveJob
	if queue {
		now := time.Now()
		for _, j := range m.ref.jobs {
			if j.status == processing {
				l := reclaim.ActiveJob{ID: m.spell(rt, j.id), Type: j.typ, ReadAt: now}
				if j.started {
					l.StartedAt = now.Add(-j.startAge)
				}
				if m.ref.fenced {
					l.Generation = j.gen
				}
				listings = append(listings, l)
			}
			old := reclaim.ActiveJob{ID: m.spell(rt, j.id), Type: j.typ, ReadAt: now, StartedAt: now.Add(-100000 * time.Hour)}
			switch {
			case !stale:
			case m.ref.fenced && active(j.status) && j.gen > 0:
				old.Generation = j.gen - 1
				listings = append(listings, old)
			case j.status == queued:
				listings = append(listings, old)
			}
		}
	}
	dropped = dropped && !m.ref.redisDown
	// The braking reclaimers reach Redis and publish their notices.
	brake := !m.ref.redisDown && !dropped && (m.braking || rapid.IntRange(0, 2).Draw(rt, "brake") == 0)
	m.braking = false
	m.step(rt, fmt.Sprintf("reclaim (queue %v, stale %v, held %d rows %d parents, redis down %v, notices dropped %v, brake %v)",
		queue, stale, len(heldRows), len(heldParents), m.ref.redisDown, dropped, brake))
	if dropped {
		m.fault()
	}
	if stale {
		m.fault()
	}
	var txs []pgx.Tx
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback(context.Background())
		}
	}()
	hold := func(sql, id string) {
		tx, err := w.env.Pool.Begin(m.ctx)
		if err != nil {
			rt.Fatalf("hold: %v", err)
		}
		txs = append(txs, tx)
		if _, err := tx.Exec(m.ctx, sql, id); err != nil {
			rt.Fatalf("hold: %v", err)
		}
		m.fault()
	}
	for j := range heldRows {
		hold(fmt.Sprintf("SELECT 1 FROM %s WHERE %s::text = $1 FOR UPDATE", w.table.QualifiedName(), ident.Quote(w.table.IDColumn)), j.id)
	}
	for j := range heldParents {
		hold(`SELECT 1 FROM parents WHERE id = $1 FOR UPDATE`, j.parent)
	}

	w.source.listings = listings
	rep, err := w.reclaim[reclaimerKey{queue: queue, down: m.ref.redisDown, deaf: dropped, brake: brake}].Sweep(m.ctx)
	if err != nil {
		rt.Fatalf("reclaim sweep: %v", err)
	}

	// The rescue first: every running job whose owner's lease is not live
	// on the database's clock goes back to QUEUED, unless its row is held.
	var lost []lostJob
	var wantRescued []string
	locked, ruleErrors, paused, would := 0, 0, 0, 0
	for _, j := range m.ref.jobs {
		if j.status != processing || j.owner == "" || m.leaseLive(j.owner) {
			continue
		}
		if heldRows[j] {
			locked++
			continue
		}
		lost = append(lost, lostJob{job: j, seen: j.gen})
		m.rescue(j)
		wantRescued = append(wantRescued, j.id)
	}
	// Then the limit rule, under the brake.
	var cands []*job
	for _, j := range m.ref.jobs {
		if !m.ref.overdue(j) {
			continue
		}
		switch m.ref.modes[j.typ] {
		case "off":
			paused++
		case "shadow":
			would++
		default:
			cands = append(cands, j)
		}
	}
	braked := 0
	if brake {
		cands, braked = m.ref.brake(cands, brakeCaps)
	}
	var want []string
	for _, j := range cands {
		ruled := w.table.ParentIDColumn != "" && (j.typ == "chapter" || j.typ == "video")
		switch {
		case heldRows[j]:
			locked++
		case ruled && (heldParents[j] && j.parentStatus == parentGenerating || j.typ == "video" && j.poisoned):
			ruleErrors++
		default:
			m.ref.reclaim(j, w.reason, ruled)
			want = append(want, j.id)
			lost = append(lost, lostJob{job: j, seen: j.gen})
		}
	}
	m.tally.reclaimed.Add(int64(len(want)))
	m.tally.rescued.Add(int64(len(wantRescued)))
	m.tally.braked.Add(int64(braked))
	m.tally.paused.Add(int64(paused))
	m.tally.shadowed.Add(int64(would))
	m.tally.locked.Add(int64(locked))
	m.tally.ruleErrors.Add(int64(ruleErrors))
	got := slices.Clone(rep.ReclaimedIDs)
	sort.Strings(got)
	sort.Strings(want)
	gotRescued := slices.Clone(rep.RescuedIDs)
	sort.Strings(gotRescued)
	sort.Strings(wantRescued)
	if !slices.Equal(got, want) || !slices.Equal(gotRescued, wantRescued) || rep.Locked != locked || rep.RuleErrors != ruleErrors {
		rt.Fatalf("reclaim sweep reclaimed %q rescued %q locked %d rule errors %d, model %q %q %d %d (report %+v)",
			got, gotRescued, rep.Locked, rep.RuleErrors, want, wantRescued, locked, ruleErrors, rep)
	}
	if rep.Paused != paused || rep.WouldReclaim != would || rep.Braked != braked {
		rt.Fatalf("reclaim sweep paused %d would reclaim %d braked %d, model %d %d %d (report %+v)",
			rep.Paused, rep.WouldReclaim, rep.Braked, paused, would, braked, rep)
	}
	wantMarkerErrors := 0
	if m.ref.redisDown {
		wantMarkerErrors = len(want)
	}
	m.expect(rt, "reclaim marker errors", markerErr(rep.MarkerErrors, wantMarkerErrors), okay)
	if !dropped {
		m.noticed(rt, lost)
	}
}

// brake is the brake's choice among the jobs a sweep decided to reclaim:
// the stalled longest first (the earliest updated_at: the longest moved
// back, then the earliest written), at most caps.MaxJobsPerType of a type
// and caps.MaxJobs in all. It returns the jobs kept and how many were held
// back.
func (m *model) brake(cands []*job, caps reclaim.Brake) ([]*job, int) {
	cands = slices.Clone(cands)
	slices.SortStableFunc(cands, func(a, b *job) int {
		if a.updAge != b.updAge {
			return -cmp.Compare(a.updAge, b.updAge)
		}
		return cmp.Compare(a.touched, b.touched)
	})
	var kept []*job
	taken := map[string]int{}
	for _, j := range cands {
		if taken[j.typ] >= caps.MaxJobsPerType || len(kept) >= caps.MaxJobs {
			continue
		}
		taken[j.typ]++
		kept = append(kept, j)
	}
	return kept, len(cands) - len(kept)
}

func markerErr(got, want int) error {
	if got != want {
		return fmt.Errorf("%d marker errors, want %d", got, want)
	}
	return nil
}
