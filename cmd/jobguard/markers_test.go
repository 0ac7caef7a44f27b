package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// pgArgs are the flags of a deployment without Redis: the database, the
// table, nothing about Redis.
func (b *bundle) pgArgs(extra ...string) []string {
	args := []string{"--database-url", b.env.DatabaseURL, "--notice-channel", b.env.Schema}
	args = append(args, tableArgs(b.jobs.Table)...)
	if b.jobs.Table.Schema == "" {
		args = append(args, "--schema", b.env.Schema)
	}
	return append(args, extra...)
}

// A deployment without Redis: no --redis-url, no --markers, and a Redis
// URL in the environment that nothing answers, which nothing may use.
func TestPostgresMarkers_SweepExplainAndRetryNeedNoRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, fixture.Default)
	noRedis := []string{envRedisURL + "=redis://" + closedPort + "/0"}
	id := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})

	r := jgEnv(t, noRedis, append([]string{"sweep", "--json", "--notices", "postgres"}, b.pgArgs()...)...)
	require.Equal(t, 0, r.code, r)
	var rep sweepJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep.Report), r)
	require.Equal(t, 1, rep.Report.Reclaimed)
	s, err := marker.NewPostgresStore(b.jobs.NoRedis(t), marker.Config{})
	require.NoError(t, err)
	_, found, err := s.Read(ctx, b.env.Pool, id)
	require.NoError(t, err)
	require.True(t, found, "the sweep wrote the marker in the table")

	r = jgEnv(t, noRedis, append([]string{"explain", id}, b.pgArgs()...)...)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^marker +generation \d+, ".*", written \S+ \(key job_reclaim_markers row \(.*, `+id+`\)\)$`, r.stdout)
	require.Regexp(t, `(?m)^start guard +refuses: reclaimed`, r.stdout)

	r = jgEnv(t, noRedis, append([]string{"retry", id}, b.pgArgs()...)...)
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "QUEUED", b.jobs.Read(t, id).Status)
}

// Without a generation, retry deletes the marker in its own transaction.
func TestPostgresMarkers_StatusOnlyRetryDeletesTheMarker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, fixture.NoGeneration)
	id := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Reason: jobguard.ReclaimedReasonDefault})
	s, err := marker.NewPostgresStore(b.jobs.NoRedis(t), marker.Config{})
	require.NoError(t, err)
	require.NoError(t, s.Write(ctx, b.env.Pool, marker.Marker{JobID: id, Reason: jobguard.ReclaimedReasonDefault}))

	r := jgEnv(t, []string{envRedisURL + "=redis://" + closedPort + "/0"}, append([]string{"retry", id, "--json"}, b.pgArgs()...)...)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `"marker_deleted": true`)
	_, found, err := s.Read(ctx, b.env.Pool, id)
	require.NoError(t, err)
	require.False(t, found)
	require.Equal(t, "QUEUED", b.jobs.Read(t, id).Status)
}

func TestMarkers_SettingComesFromFlagEnvOrConfigAndIsChecked(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	id := b.jobs.Insert(t, fixture.Job{})
	closed := "redis://" + closedPort + "/0"

	// Each names Redis, which then must answer.
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"--markers", "redis", "--redis-url", closed}},
		{[]string{envMarkers + "=redis", envRedisURL + "=" + closed}, nil},
		{[]string{envRedisURL + "=" + closed}, []string{"--config", writeConfig(t, `{"shared": {"markers": "redis"}}`)}},
	} {
		r := jgEnv(t, c.env, append(append([]string{"sweep"}, b.pgArgs()...), c.args...)...)
		require.Equal(t, 1, r.code, r)
		require.Contains(t, r.stderr, "cannot reach Redis at 127.0.0.1:1", r)
	}
	// The flag wins over the environment.
	r := jgEnv(t, []string{envMarkers + "=redis", envRedisURL + "=" + closed}, append([]string{"explain", id, "--markers", "postgres"}, b.pgArgs()...)...)
	require.Equal(t, 0, r.code, r)

	r = jg(t, append([]string{"sweep", "--markers", "memcached"}, b.pgArgs()...)...)
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, `--markers "memcached": want postgres or redis`)
}

// Without a generation, with the markers in Postgres (the default), retry
// refuses a job that is not FAILED (exit 4) and an unknown one (exit 3),
// as it does on every other table: the retry's transaction rolls back, and
// the command must not say that the job was retried.
func TestPostgresMarkers_StatusOnlyRetryRefusesAJobThatIsNotFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.NoGeneration)
	running := b.jobs.Insert(t, fixture.Job{UpdatedAgo: time.Hour})
	noRedis := []string{envRedisURL + "=redis://" + closedPort + "/0"}

	r := jgEnv(t, noRedis, append([]string{"retry", running}, b.pgArgs()...)...)
	require.Equal(t, "PROCESSING", b.jobs.Read(t, running).Status, "nothing was changed")
	require.Equal(t, 4, r.code, r)
	require.Contains(t, r.stderr, "job "+running+" is PROCESSING: only a FAILED job can be retried; nothing was changed")
	require.NotContains(t, r.stdout, "QUEUED")

	r = jgEnv(t, noRedis, append([]string{"retry", "00000000-0000-4000-8000-00000000dead", "--json"}, b.pgArgs()...)...)
	require.Equal(t, 3, r.code, r)
	require.Empty(t, r.stdout)
}
