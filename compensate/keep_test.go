package compensate_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

func TestKeep_KeepsTheArtifactsOnlyIfTheCompletionCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	file, asset := b.produce(t, exec)

	boom := errors.New("save failed")
	err := b.jobs.Guard.CompleteTx(ctx, b.env.Pool, exec, func(tx pgx.Tx) error {
		if err := b.arts.Keep(ctx, tx, exec); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, map[string]string{file: "pending", asset: "pending"}, b.states(t, exec), "rolled back with the completion")

	require.NoError(t, b.jobs.Guard.CompleteTx(ctx, b.env.Pool, exec, func(tx pgx.Tx) error {
		return b.arts.Keep(ctx, tx, exec)
	}))
	require.Equal(t, map[string]string{file: "kept", asset: "kept"}, b.states(t, exec))
	rep, err := b.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Compensated)
	require.True(t, b.assetExists(t, asset))
}
