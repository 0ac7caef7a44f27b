package jobguard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

func TestMarkerStore_WriteNeverLowersTheGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	s, err := jobguard.NewMarkerStore(env.Redis, jobguard.MarkerConfig{Prefix: env.Prefix})
	require.NoError(t, err)
	at := time.Now()

	require.NoError(t, s.Write(ctx, jobguard.Marker{JobID: "job-1", Generation: 5, Reason: "newer", At: at}))
	require.NoError(t, s.Write(ctx, jobguard.Marker{JobID: "job-1", Generation: 3, Reason: "older", At: at}))
	m, found, err := s.Read(ctx, "job-1")
	require.NoError(t, err)
	require.True(t, found)
	require.EqualValues(t, 5, m.Generation, "a late writer of an older generation changes nothing")
	require.Equal(t, "newer", m.Reason)
}

func TestMarkerStore_WritersOutOfOrderKeepTheHighestGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	const writers = 20
	var wg sync.WaitGroup
	for g := range writers {
		// A client each, like reclaimers in separate processes.
		s, err := jobguard.NewMarkerStore(env.Redis, jobguard.MarkerConfig{Prefix: env.Prefix})
		require.NoError(t, err)
		wg.Go(func() {
			for i := range 50 {
				job := fmt.Sprintf("job-%d", i)
				if err := s.Write(ctx, jobguard.Marker{JobID: job, Generation: int64(writers - g), At: time.Now()}); err != nil {
					t.Errorf("write: %v", err)
				}
			}
		})
	}
	wg.Wait()
	s, err := jobguard.NewMarkerStore(env.Redis, jobguard.MarkerConfig{Prefix: env.Prefix})
	require.NoError(t, err)
	for i := range 50 {
		m, found, err := s.Read(ctx, fmt.Sprintf("job-%d", i))
		require.NoError(t, err)
		require.True(t, found)
		require.EqualValues(t, writers, m.Generation)
	}
}

// A server restarted, or flushed its scripts, no longer knows the script by
// its hash: the markers still go out.
func TestMarkerStore_WritesAfterTheServerForgotTheScript(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	s, err := jobguard.NewMarkerStore(env.Redis, jobguard.MarkerConfig{Prefix: env.Prefix})
	require.NoError(t, err)
	require.NoError(t, env.Redis.ScriptFlush(ctx).Err())

	require.NoError(t, s.Write(ctx, jobguard.Marker{JobID: "a", Generation: 2}, jobguard.Marker{JobID: "b", Generation: 3}))
	for id, gen := range map[string]int64{"a": 2, "b": 3} {
		m, found, err := s.Read(ctx, id)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, gen, m.Generation)
	}
	ttl, err := env.Redis.PTTL(ctx, s.Key("a")).Result()
	require.NoError(t, err)
	require.InDelta(t, jobguard.MarkerTTLDefault.Seconds(), ttl.Seconds(), 60, "the store's TTL")
}
