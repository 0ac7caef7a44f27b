package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// go-redis's own lines (a pool that cannot dial) stay out of what the
// command prints: the command says once what failed, in its own words.
// They are debug lines of the command's logger, shown at --log-level
// debug only.
func TestRedisLogs_DialNoiseOnlyAtDebug(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	id := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	dead := "redis://" + closedPort + "/0"

	r := b.run(t, "explain", id, "--redis-url", dead)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "the reclaim marker could not be read from Redis at 127.0.0.1:1")
	require.NotContains(t, r.stderr, "connection pool", r)
	require.NotContains(t, r.stderr, "go-redis", r)

	r = b.run(t, "sweep", "--redis-url", dead)
	require.Equal(t, 1, r.code, r)
	require.NotContains(t, r.stderr, "go-redis", r)

	r = b.run(t, "sweep", "--redis-url", dead, "--log-level", "debug")
	require.Equal(t, 1, r.code, r)
	require.Regexp(t, `level=DEBUG msg="redis: connection pool: failed to dial.*from=go-redis`, r.stderr)
}
