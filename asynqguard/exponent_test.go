package asynqguard_test

import (
	"encoding/json"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/asynqguard"
)

// TestMiddleware_NumberWithHugeExponentIsRefusedNotRetried: a payload
// whose id is a JSON number with an exponent near int64's bounds names
// no row, like any other number past int64; asynq archives the task at
// once, without a retry.
func TestMiddleware_NumberWithHugeExponentIsRefusedNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var n calls
	b.serve(t, asynqguard.Config{}, nowhere(&n))

	task := b.enqueue(t, json.RawMessage(`{"job_id":1e9223372036854775807}`))

	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateArchived, info.State, info.LastErr)
	require.Zero(t, info.Retried, info.LastErr)
	require.Contains(t, info.LastErr, `jobguard: invalid job id`)
	require.Zero(t, n.get())
}
