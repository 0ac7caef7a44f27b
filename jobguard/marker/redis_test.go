package marker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard/marker"
)

func TestRedisStore_WriteNeverLowersTheGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	guard := fixture.Create(t, env, fixture.TextID).Guard
	s, err := marker.NewRedisStore(guard, env.Redis, marker.Config{})
	require.NoError(t, err)
	at := time.Now()

	require.NoError(t, s.Write(ctx, marker.Marker{JobID: "job-1", Generation: 5, Reason: "newer", At: at}))
	require.NoError(t, s.Write(ctx, marker.Marker{JobID: "job-1", Generation: 3, Reason: "older", At: at}))
	m, found, err := s.Read(ctx, "job-1")
	require.NoError(t, err)
	require.True(t, found)
	require.EqualValues(t, 5, m.Generation, "a late writer of an older generation changes nothing")
	require.Equal(t, "newer", m.Reason)
}

func TestRedisStore_WritersOutOfOrderKeepTheHighestGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	guard := fixture.Create(t, env, fixture.TextID).Guard
	const writers = 20
	var wg sync.WaitGroup
	for g := range writers {
		// A client each, like reclaimers in separate processes.
		s, err := marker.NewRedisStore(guard, env.Redis, marker.Config{})
		require.NoError(t, err)
		wg.Go(func() {
			for i := range 50 {
				job := fmt.Sprintf("job-%d", i)
				if err := s.Write(ctx, marker.Marker{JobID: job, Generation: int64(writers - g), At: time.Now()}); err != nil {
					t.Errorf("write: %v", err)
				}
			}
		})
	}
	wg.Wait()
	s, err := marker.NewRedisStore(guard, env.Redis, marker.Config{})
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
func TestRedisStore_WritesAfterTheServerForgotTheScript(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	guard := fixture.Create(t, env, fixture.TextID).Guard
	s, err := marker.NewRedisStore(guard, env.Redis, marker.Config{})
	require.NoError(t, err)
	require.NoError(t, env.Redis.ScriptFlush(ctx).Err())

	require.NoError(t, s.Write(ctx, marker.Marker{JobID: "a", Generation: 2}, marker.Marker{JobID: "b", Generation: 3}))
	for id, gen := range map[string]int64{"a": 2, "b": 3} {
		m, found, err := s.Read(ctx, id)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, gen, m.Generation)
	}
	ttl, err := env.Redis.PTTL(ctx, s.Key("a")).Result()
	require.NoError(t, err)
	require.InDelta(t, marker.TTLDefault.Seconds(), ttl.Seconds(), 60, "the store's TTL")
}

// The markers of a sweep are encoded by hand for speed; what is stored must
// be what json.Marshal gives, since any reader may decode it.
func TestRedisStore_WritesWhatJSONMarshalWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	guard := fixture.Create(t, env, fixture.TextID).Guard
	s, err := marker.NewRedisStore(guard, env.Redis, marker.Config{})
	require.NoError(t, err)
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.FixedZone("KST", 9*3600))
	markers := []marker.Marker{
		{JobID: "a", Generation: 1, Reason: "reclaimed: \"quoted\" <tag> & 日本", At: at},
		{JobID: "b", Generation: 9223372036854775807, Reason: "reclaimed: \"quoted\" <tag> & 日本", At: at},
		{JobID: "c", Generation: 0, Reason: "other", At: at.Add(time.Second)},
	}
	require.NoError(t, s.Write(ctx, markers...))
	for _, m := range markers {
		got, err := env.Redis.Get(ctx, s.Key(m.JobID)).Result()
		require.NoError(t, err)
		want, err := json.Marshal(m)
		require.NoError(t, err)
		require.JSONEq(t, string(want), got)
		require.Equal(t, string(want), got)
	}
}

// aClient is a Redis client of a kind the store does not know (a wrapper,
// say): it gets one script call per marker, as a Cluster client does.
type aClient struct{ marker.Redis }

func TestRedisStore_OneCallPerMarkerForAClientOfUnknownKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	guard := fixture.Create(t, env, fixture.TextID).Guard
	single, err := marker.NewRedisStore(guard, env.Redis, marker.Config{})
	require.NoError(t, err)
	wrapped, err := marker.NewRedisStore(guard, aClient{env.Redis}, marker.Config{})
	require.NoError(t, err)
	var markers []marker.Marker
	for i := range 1200 { // more than one call's worth on a single server
		markers = append(markers, marker.Marker{JobID: fmt.Sprintf("job-%d", i), Generation: 5, At: time.Now()})
	}
	require.NoError(t, single.Write(ctx, markers...))
	for i := range markers {
		markers[i].Generation = 3 + int64(i%2)*3 // 3 is older, 6 newer
	}
	require.NoError(t, wrapped.Write(ctx, markers...))
	for i, m := range markers {
		got, found, err := single.Read(ctx, m.JobID)
		require.NoError(t, err)
		require.True(t, found)
		require.EqualValues(t, max(5, m.Generation), got.Generation, "marker %d", i)
	}
}
