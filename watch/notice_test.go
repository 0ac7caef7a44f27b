package watch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPayloads_SplitAtTheLimitAndKeepOrder(t *testing.T) {
	t.Parallel()
	var in []Notice
	for i := range 500 {
		in = append(in, Notice{JobID: fmt.Sprintf("job-%04d-%s", i, strings.Repeat("x", i%40)), Generation: int64(i)})
	}
	msgs, err := payloads(in, PostgresPayloadMax)
	require.NoError(t, err)
	require.Greater(t, len(msgs), 1)
	var out []Notice
	for _, m := range msgs {
		require.LessOrEqual(t, len(m), PostgresPayloadMax)
		ns, err := decode(m)
		require.NoError(t, err)
		out = append(out, ns...)
	}
	require.Equal(t, in, out)
}

func TestPayloads_ExactFitIsOnePayload(t *testing.T) {
	t.Parallel()
	one := `{"job_id":"a","generation":1}`
	msgs, err := payloads([]Notice{{JobID: "a", Generation: 1}, {JobID: "a", Generation: 1}}, 2*len(one)+3)
	require.NoError(t, err)
	require.Equal(t, []string{"[" + one + "," + one + "]"}, msgs)
	msgs, err = payloads([]Notice{{JobID: "a", Generation: 1}, {JobID: "a", Generation: 1}}, 2*len(one)+2)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
}

func TestPayloads_OversizedNoticeIsLeftOut(t *testing.T) {
	t.Parallel()
	msgs, err := payloads([]Notice{{JobID: strings.Repeat("x", 100)}, {JobID: "b"}}, 64)
	require.ErrorIs(t, err, ErrNoticeTooLarge)
	require.Equal(t, []string{`[{"job_id":"b","generation":0}]`}, msgs)
	msgs, err = payloads(nil, 64)
	require.NoError(t, err)
	require.Empty(t, msgs)
}
