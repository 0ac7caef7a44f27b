package bullmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/rediscluster"
	"github.com/jobguard/jobguard/internal/testkit/sourcetest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/bullmq"
)

// The source on a real Redis Cluster, with a real BullMQ worker of each
// major connected to it through ioredis's Cluster client: the snapshot script
// reads the active list and the job hashes, which share a slot only through
// the prefix's hash tag.
func TestSource_OnACluster(t *testing.T) {
	t.Parallel()
	c := rediscluster.Start(t)
	url := "redis-cluster://" + strings.Join(c.Addrs, ",")

	// One cluster for every major: starting one costs seconds.
	eachMajor(t, func(t *testing.T, m *major) {
		t.Run("ListsTheJobsARealWorkerHolds", func(t *testing.T) {
			t.Parallel()
			rdb := c.Client(t)
			prefix := rediscluster.KeyPrefix(t) + ":{bull}"
			h := runBullMQAt(t, m, url, prefix, "chapters", 3, "")
			require.Len(t, h.Held, 3)

			src, err := bullmq.New(bullmq.Config{Redis: rdb, Prefix: prefix, Queue: "chapters"})
			require.NoError(t, err)
			got, err := sourcetest.All(context.Background(), src, 2)
			require.NoError(t, err)
			want := make([]reclaim.ActiveJob, len(h.Held))
			for i, j := range h.Held {
				want[i] = reclaim.ActiveJob{ID: j.ID, Type: "chapter", StartedAt: time.UnixMilli(j.ProcessedOn)}
			}
			require.ElementsMatch(t, want, got, "processedOn of each held job, and no finished job")
		})

		t.Run("SweepReclaimsTheJobsARealWorkerHolds", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := testenv.New(t)
			rdb := c.Client(t)
			jobs := fixture.Create(t, env, fixture.TextID)
			for i := range 3 {
				jobs.Insert(t, fixture.Job{ID: "row-" + itoa(i), UpdatedAgo: 2 * time.Hour})
			}
			prefix := env.Prefix + ":{bull}"
			runBullMQAt(t, m, url, prefix, "chapters", 3, "")

			src, err := bullmq.New(bullmq.Config{Redis: rdb, Prefix: prefix, Queue: "chapters", RowIDField: "rowId"})
			require.NoError(t, err)
			r, err := reclaim.New(reclaim.Config{
				Guard: jobs.Guard, DB: env.Pool, Redis: rdb, Source: src,
				Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute},
				// An hour later, by the reclaimer's clock: the held jobs are over
				// their limit and have not progressed.
				Now: func() time.Time { return time.Now().Add(time.Hour) },
			})
			require.NoError(t, err)
			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, 3, rep.Reclaimed)
			require.Zero(t, rep.MarkerErrors)
			require.ElementsMatch(t, []string{"row-0", "row-1", "row-2"}, rep.ReclaimedIDs)

			sg, err := jobguard.NewStartGuard(jobs.Guard, rdb, jobguard.StartGuardConfig{})
			require.NoError(t, err)
			for _, id := range rep.ReclaimedIDs {
				require.Equal(t, "dead", jobs.Read(t, id).Status)
				_, found, err := sg.Markers().Read(ctx, id)
				require.NoError(t, err)
				require.True(t, found, "job %s has its marker on the cluster", id)
			}
		})
	})
}
