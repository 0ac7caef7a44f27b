package rediscluster_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/rediscluster"
)

// A started cluster serves every slot from three masters, and the test that
// started it leaves no node running and no port taken.
func TestStart_ServesEverySlotAndLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	var addrs []string
	t.Run("cluster", func(t *testing.T) {
		ctx := context.Background()
		c := rediscluster.Start(t)
		addrs = c.Addrs
		require.Len(t, c.Addrs, rediscluster.Masters)

		rdb := c.Client(t)
		slots, err := rdb.ClusterSlots(ctx).Result()
		require.NoError(t, err)
		require.Len(t, slots, rediscluster.Masters, "one slot range per master")
		served := 0
		for _, s := range slots {
			served += int(s.End-s.Start) + 1
			require.Len(t, s.Nodes, 1, "no replicas")
		}
		require.Equal(t, 16384, served)

		prefix := rediscluster.KeyPrefix(t)
		for i := range 300 {
			require.NoError(t, rdb.Set(ctx, fmt.Sprintf("%s:%d", prefix, i), i, time.Minute).Err())
		}
		counts, err := c.KeysPerMaster(ctx, prefix+":*")
		require.NoError(t, err)
		total := 0
		for i, n := range counts {
			require.NotZero(t, n, "master %s holds none of 300 keys", c.Addrs[i])
			total += n
		}
		require.Equal(t, 300, total)
	})
	for _, addr := range addrs {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		require.Error(t, err, "%s still answers after its test ended", addr)
	}
}
