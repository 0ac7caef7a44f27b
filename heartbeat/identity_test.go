package heartbeat_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

// TestBeat_EverySpellingOfAnIDIsOneSlot beats one job through every
// spelling of its id: the first writes, every other is throttled, one
// slot is held, and Forget through any spelling frees it.
func TestBeat_EverySpellingOfAnIDIsOneSlot(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		b := setupJobs(t, jobs)
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{Generation: 1})
		spellings := jobs.Spellings(id)
		for i, sp := range spellings {
			res, err := b.hb.Beat(ctx, b.env.Pool, jobguard.Execution{JobID: sp.ID, Generation: 1}, heartbeat.Progress(i))
			require.NoError(t, err, "%s %q", sp.Name, sp.ID)
			want := heartbeat.Throttled
			if i == 0 {
				want = heartbeat.Written
			}
			require.Equal(t, want, res, "%s %q", sp.Name, sp.ID)
		}
		require.Equal(t, 1, b.writes(t, id))
		require.Equal(t, 1, b.hb.Len(), "one slot")
		for _, sp := range spellings {
			b.hb.Forget(sp.ID)
			require.Zero(t, b.hb.Len(), "Forget(%q)", sp.ID)
			res, err := b.hb.Beat(ctx, b.env.Pool, jobguard.Execution{JobID: sp.ID, Generation: 1}, heartbeat.Progress(1))
			require.NoError(t, err, "%s %q", sp.Name, sp.ID)
			require.Equal(t, heartbeat.Written, res, "%s %q after Forget", sp.Name, sp.ID)
			require.Equal(t, 1, b.hb.Len())
		}
	})
}
