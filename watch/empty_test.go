package watch_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/watch"
)

// Publishing no notices, in either spelling, sends nothing on either
// transport and leaves a reclaim's transaction usable.
func TestPublish_NoNoticesSendsNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	for _, kind := range transports {
		pub, err := watch.NewPublisher(jobs.Guard, transportFor(env, kind))
		require.NoError(t, err)
		require.NoError(t, pub.Publish(ctx), kind)
		require.NoError(t, pub.Publish(ctx, []watch.Notice{}...), kind)
		if kind != "postgres" {
			continue
		}
		tx, err := env.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, pub.PublishOn(ctx, tx))
		require.NoError(t, pub.PublishOn(ctx, tx, []watch.Notice(nil)...))
		var one int
		require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&one))
		require.NoError(t, tx.Rollback(ctx))
	}
}
