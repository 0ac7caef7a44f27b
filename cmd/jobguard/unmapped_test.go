package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

// A mapping that names only the table leaves its optional columns out. Every
// command warns of a column under a default name that it leaves out, and
// retry refuses while that column is the generation: a retry that bumps no
// generation would let the execution from before it complete the job.
func TestRetry_AGenerationColumnTheMappingLeavesOutIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	failed := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Generation: 5, Reason: jobguard.ReclaimedReasonDefault})

	r := jg(t, "retry", failed, "--database-url", b.env.DatabaseURL, "--redis-url", b.env.RedisURL,
		"--markers", "redis", "--prefix", b.env.Prefix, "--notice-channel", b.env.Schema,
		"--schema", b.env.Schema, "--table", b.jobs.Table.Name)
	require.Equal(t, exitError, r.code, "%s", r)
	require.Contains(t, r.stderr, `has a column "generation" that the mapping leaves out`)
	require.Contains(t, r.stderr, "--generation-column generation")
	row := b.jobs.Read(t, failed)
	require.Equal(t, "FAILED", row.Status, "nothing is changed")
	require.EqualValues(t, 5, row.Generation)

	stale := b.jobs.Guard.CompleteIfActive(context.Background(), b.env.Pool, jobguard.Execution{JobID: failed, Generation: 5})
	require.ErrorIs(t, stale, jobguard.ErrJobTerminal, "the execution from before stays fenced out")
}

// explain and limits warn of it too, on stderr.
func TestExplain_AnUnmappedDefaultColumnIsWarnedOf(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	id := b.jobs.Insert(t, fixture.Job{Status: "PROCESSING", Generation: 1})

	r := jg(t, "explain", id, "--database-url", b.env.DatabaseURL, "--redis-url", b.env.RedisURL,
		"--markers", "redis", "--prefix", b.env.Prefix, "--notice-channel", b.env.Schema,
		"--schema", b.env.Schema, "--table", b.jobs.Table.Name)
	require.Contains(t, r.stderr, "column=generation field=GenerationColumn", "%s", r)
}
