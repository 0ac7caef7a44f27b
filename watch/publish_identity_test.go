package watch_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// TestPublish_NoticeNamesTheJobByItsCanonicalID publishes a notice of an
// integer-id job spelled "+0042" and reads what goes on the wire: the notice
// must name the job as the column prints it ("42"), as every key the
// library writes does. An id the column cannot hold must be refused with
// ErrInvalidJobID rather than sent.
func TestPublish_NoticeNamesTheJobByItsCanonicalID(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.IntID)
	tr := watch.Transport{Redis: env.Redis}
	pub, err := watch.NewPublisher(jobs.Guard, tr)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := env.Redis.Subscribe(ctx, jobs.Guard.Shared().Prefix+":reclaim-notices")
	defer sub.Close()
	_, err = sub.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)

	require.NoError(t, pub.Publish(ctx, watch.Notice{JobID: "+0042", Generation: 3}))
	msg, err := sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	var got []struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(msg.Payload), &got), msg.Payload)
	require.Len(t, got, 1)
	require.Equal(t, "42", got[0].JobID, "notice on the wire: %s", msg.Payload)

	err = pub.Publish(ctx, watch.Notice{JobID: "not-an-integer", Generation: 3})
	require.ErrorIs(t, err, jobguard.ErrInvalidJobID)
}
