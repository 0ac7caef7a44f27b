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

// retry refuses a job that is not FAILED (exit 4) and changes nothing;
// it moves a FAILED one back to QUEUED with the next generation, its
// reason cleared; an unknown job exits 3.
func TestRetry_RefusesAProcessingJobAndBumpsAFailedOnesGeneration(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Prisma)
	running := b.jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
	failed := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Generation: 5, Reason: jobguard.ReclaimedReasonDefault})

	r := b.run(t, "retry", running)
	require.Equal(t, 4, r.code, r)
	require.Contains(t, r.stderr, "job "+running+" is PROCESSING: only a FAILED job can be retried; nothing was changed")
	row := b.jobs.Read(t, running)
	require.Equal(t, "PROCESSING", row.Status)
	require.EqualValues(t, 2, row.Generation)

	r = b.run(t, "retry", failed)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "Job "+failed+": FAILED -> QUEUED, generation 5 -> 6.")
	require.Contains(t, r.stdout, `Cleared failure reason: "`+jobguard.ReclaimedReasonDefault+`".`)
	row = b.jobs.Read(t, failed)
	require.Equal(t, "QUEUED", row.Status)
	require.EqualValues(t, 6, row.Generation)
	require.Empty(t, row.Reason)

	// Once retried it is QUEUED, which is no longer retryable.
	r = b.run(t, "retry", failed, "--json")
	require.Equal(t, 4, r.code, r)
	require.Empty(t, r.stdout)

	r = b.run(t, "retry", "c-no-such-job")
	require.Equal(t, 3, r.code, r)
	require.Contains(t, r.stderr, "job c-no-such-job not found in ")
}

// On a table without a generation column, retry deletes the job's marker
// too, which would otherwise still refuse it; --json says so.
func TestRetry_StatusOnlyTableDeletesTheMarker(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.NoGeneration)
	id := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Reason: jobguard.ReclaimedReasonDefault})
	markers, err := marker.NewRedisStore(b.jobs.Guard, b.env.Redis, marker.Config{})
	require.NoError(t, err)
	require.NoError(t, markers.Write(context.Background(), marker.Marker{JobID: id, Reason: jobguard.ReclaimedReasonDefault, At: time.Now()}))

	r := b.run(t, "retry", id, "--json")
	require.Equal(t, 0, r.code, r)
	var out struct {
		Status        string `json:"status"`
		Generation    *int64 `json:"generation"`
		MarkerDeleted bool   `json:"marker_deleted"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r)
	require.Equal(t, "QUEUED", out.Status)
	require.Nil(t, out.Generation, "no generation column")
	require.True(t, out.MarkerDeleted)
	require.False(t, hasMarker(t, b, id))
	require.Equal(t, "QUEUED", b.jobs.Read(t, id).Status)
}
