package watch_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/rediscluster"
	"github.com/jobguard/jobguard/watch"
)

// Notices over pub/sub on a real Redis Cluster: the watcher subscribes on the
// master that serves its channel's slot, and a publish on any node reaches
// it over the cluster bus.
func TestWatch_OnACluster(t *testing.T) {
	t.Parallel()
	c := rediscluster.Start(t)
	transport := func(t *testing.T) watch.Transport {
		return watch.Transport{Redis: c.Client(t)}
	}

	t.Run("NoticeCancelsReclaimedExecution", func(t *testing.T) {
		t.Parallel()
		// Pings every 100ms: the subscription must stay up through several
		// quiet intervals, each ended by a ping the cluster node answers,
		// before the notice comes.
		b := setup(t, "redis", fixture.Default, watch.Config{Transport: transport(t), CheckInterval: time.Hour, PingInterval: 100 * time.Millisecond})
		reclaimed, unrelated := b.start(t, 3), b.start(t, 3)
		ctx := b.watch(t, reclaimed)
		other := b.watch(t, unrelated)
		time.Sleep(350 * time.Millisecond)
		require.True(t, b.w.Subscribed())

		at := b.reclaim(t, true, reclaimed.JobID)
		cause, _ := cancelledWithin(t, ctx, at, time.Second)
		require.Equal(t, watch.ViaNotice, cause.Via)
		require.Equal(t, reclaimed.JobID, cause.JobID)
		require.EqualValues(t, 3, cause.Seen)
		requireAlive(t, other, "the unrelated job's execution")
		require.NotContains(t, b.logs.String(), "subscription lost", "the pings kept the subscription")
	})

	// A reclaimer may reach the cluster through any node; PUBLISH on one
	// node is sent to the subscribers of every node.
	t.Run("NoticePublishedOnAnyNodeArrives", func(t *testing.T) {
		t.Parallel()
		tr := transport(t)
		b := setup(t, "redis", fixture.Default, watch.Config{Transport: tr, CheckInterval: time.Hour})
		for _, addr := range c.Addrs {
			exec := b.start(t, 2)
			ctx := b.watch(t, exec)
			node := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = node.Close() })
			pub, err := watch.NewPublisher(b.jobs.Guard, watch.Transport{Redis: node})
			require.NoError(t, err)
			require.NoError(t, pub.Publish(context.Background(), watch.Notice{JobID: exec.JobID, Generation: 2}))
			cause, _ := cancelledWithin(t, ctx, time.Now(), time.Second)
			require.Equal(t, watch.ViaNotice, cause.Via, "published on %s", addr)
		}
	})

	// A reclaim whose notice never went out is still found by the periodic
	// check, with the subscription on the cluster.
	t.Run("CheckFindsAReclaimWithoutANotice", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "redis", fixture.Default, watch.Config{Transport: transport(t), CheckInterval: 100 * time.Millisecond})
		exec := b.start(t, 1)
		ctx := b.watch(t, exec)
		at := b.reclaim(t, false, exec.JobID)
		cause, _ := cancelledWithin(t, ctx, at, 2*time.Second)
		require.Equal(t, watch.ViaCheck, cause.Via)
		require.Equal(t, "FAILED", cause.Status)
	})
}
