package watch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// table is a jobs table's key, as the notices of these tests name it.
const table = `"public"."jobs"`

func TestPayloads_SplitAtTheLimitAndKeepOrder(t *testing.T) {
	t.Parallel()
	var in []Notice
	for i := range 500 {
		in = append(in, Notice{JobID: fmt.Sprintf("job-%04d-%s", i, strings.Repeat("x", i%40)), Generation: int64(i)})
	}
	msgs, err := payloads(table, in, PostgresPayloadMax)
	require.NoError(t, err)
	require.Greater(t, len(msgs), 1)
	var out []Notice
	for _, m := range msgs {
		require.LessOrEqual(t, len(m), PostgresPayloadMax)
		ns, err := decode(m)
		require.NoError(t, err)
		for _, n := range ns {
			require.Equal(t, table, n.Table, "every notice names its jobs table")
			out = append(out, Notice{JobID: n.JobID, Generation: n.Generation})
		}
	}
	require.Equal(t, in, out)
}

func TestPayloads_ExactFitIsOnePayload(t *testing.T) {
	t.Parallel()
	one := `{"job_id":"a","generation":1,"table":"\"public\".\"jobs\""}`
	msgs, err := payloads(table, []Notice{{JobID: "a", Generation: 1}, {JobID: "a", Generation: 1}}, 2*len(one)+3)
	require.NoError(t, err)
	require.Equal(t, []string{"[" + one + "," + one + "]"}, msgs)
	msgs, err = payloads(table, []Notice{{JobID: "a", Generation: 1}, {JobID: "a", Generation: 1}}, 2*len(one)+2)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
}

func TestPayloads_OversizedNoticeIsLeftOut(t *testing.T) {
	t.Parallel()
	msgs, err := payloads(table, []Notice{{JobID: strings.Repeat("x", 100)}, {JobID: "b"}}, 80)
	require.ErrorIs(t, err, ErrNoticeTooLarge)
	require.Equal(t, []string{`[{"job_id":"b","generation":0,"table":"\"public\".\"jobs\""}]`}, msgs)
	msgs, err = payloads(table, nil, 64)
	require.NoError(t, err)
	require.Empty(t, msgs)
}
