package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// TestSweep_EverySpellingOfAListedIDIsOneJob lists a stalled job under
// every spelling of its id, as queues that store ids as their producers
// wrote them would: Plan decides it once, the sweep reclaims it once, and
// its report, its marker and its notice name it by its canonical id.
func TestSweep_EverySpellingOfAListedIDIsOneJob(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
		var listed listSource
		for _, sp := range jobs.Spellings(id) {
			listed = append(listed, reclaim.ActiveJob{ID: sp.ID, Type: "chapter", StartedAt: time.Now().Add(-2 * time.Hour)})
		}
		pub := &recordingPublisher{}
		r, _ := newReclaimer(t, jobs, reclaim.Config{Source: listed, Notices: pub, PageSize: len(listed)})

		plan, err := r.Plan(ctx)
		require.NoError(t, err)
		require.Len(t, plan.Jobs, 1, "one job, one decision: %v", plan.Jobs)
		require.Equal(t, id, plan.Jobs[0].ID)
		require.Equal(t, reclaim.DecisionReclaim, plan.Jobs[0].Decision)
		require.Equal(t, []string{id}, plan.Report.WouldReclaimIDs)

		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Scanned)
		require.Equal(t, []string{id}, rep.ReclaimedIDs)
		require.Zero(t, rep.LostRace+rep.SourceErrors, "no phantom job")
		gen := int64(1)
		if !jobs.Guard.Fenced() {
			gen = 0
		}
		require.Equal(t, []jobguard.Execution{{JobID: id, Generation: gen}}, pub.got)
		keys, err := jobs.Env.Redis.Keys(ctx, jobs.Env.Prefix+":*").Result()
		require.NoError(t, err)
		require.Len(t, keys, 1, "one marker: %q", keys)
		require.Contains(t, keys[0], "{"+id+"}")
		for _, sp := range jobs.Spellings(id) {
			require.True(t, hasMarker(t, jobs, sp.ID), "the marker is found through %s %q", sp.Name, sp.ID)
		}
	})
}
