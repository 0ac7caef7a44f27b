package compensate_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
)

// A compensator whose error holds U+0000 or bytes that are not UTF-8
// fails its artifact like any other: the artifact stays owed with the
// error as text can hold it, and the sweep goes on to the next artifact.
// The error could not be written as it was, which failed the whole sweep
// at that artifact, every sweep, so that no artifact after it was ever
// compensated.
func TestCompensate_CompensatorErrorThatTextCannotHoldFailsOnlyItsArtifact(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bad := b.lostExecution(t, "bad.mp4")
	good := b.lostExecution(t, "good.mp4")
	arts, err := compensate.New(ctx, compensate.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool,
		Compensators: map[string]compensate.Func{"file": func(ctx context.Context, tx pgx.Tx, a compensate.Artifact) error {
			if a.Ref == "bad.mp4" {
				return errors.New("store says no\x00 at \xff")
			}
			return b.files.compensate(ctx, tx, a)
		}},
	})
	require.NoError(t, err)

	rep, err := arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Compensated, "%+v", rep)
	require.Equal(t, 1, rep.Failed, "%+v", rep)
	require.Equal(t, map[string]string{"good.mp4": "done"}, b.states(t, good))
	require.Equal(t, map[string]string{"bad.mp4": "rejected"}, b.states(t, bad), "still owed")
	var lastError string
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT last_error FROM job_artifacts WHERE ref = 'bad.mp4'`).Scan(&lastError))
	require.Contains(t, lastError, "store says no\\x00 at \uFFFD")
}
