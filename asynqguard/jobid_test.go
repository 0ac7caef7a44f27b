package asynqguard

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
)

func TestPayloadID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, payload, want, err string
	}{
		{name: "string", payload: `{"job_id": "7c2a0e64-1b7f-4a62-9d55-0d0c2b7f2a10", "weeks": 2}`, want: "7c2a0e64-1b7f-4a62-9d55-0d0c2b7f2a10"},
		{name: "integer", payload: `{"job_id": 42}`, want: "42"},
		{name: "negative integer, left to Start to refuse", payload: `{"job_id": -1}`, want: "-1"},
		{name: "negative zero is the integer zero, as River's args read it", payload: `{"job_id": -0}`, want: "0"},
		{name: "key missing", payload: `{"weeks": 2}`, err: `the payload has no "job_id"`},
		{name: "empty object", payload: `{}`, err: `the payload has no "job_id"`},
		{name: "null payload", payload: `null`, err: `the payload has no "job_id"`},
		{name: "empty payload", payload: ``, err: "the payload is not a JSON object"},
		{name: "not JSON", payload: `job_id=1`, err: "the payload is not a JSON object"},
		{name: "an array", payload: `[1]`, err: "the payload is not a JSON object"},
		{name: "null", payload: `{"job_id": null}`, err: `"job_id" is null`},
		{name: "empty string", payload: `{"job_id": ""}`, err: `"job_id" is empty`},
		{name: "fraction", payload: `{"job_id": 4.5}`, err: `"job_id" is 4.5, not a string or an integer`},
		{name: "bool", payload: `{"job_id": true}`, err: `"job_id" is true, not a string or an integer`},
		{name: "object", payload: `{"job_id": {"id": 1}}`, err: `"job_id" is {"id": 1}, not a string or an integer`},
		{name: "long value is cut", payload: `{"job_id": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}`, err: `"job_id" is [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,…, not a string`},
		{name: "cut between runes", payload: `{"job_id": ["xααααααααααααααααααααα"]}`, err: `"job_id" is ["xαααααααααααααααααα…, not a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := payloadID([]byte(tc.payload), "job_id")
			if tc.err != "" {
				require.ErrorIs(t, err, jobguard.ErrInvalidJobID)
				require.True(t, jobguard.IsPermanent(err))
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestPayloadID_OtherKey(t *testing.T) {
	t.Parallel()
	got, err := payloadID([]byte(`{"job_id": "a", "rowId": "b"}`), "rowId")
	require.NoError(t, err)
	require.Equal(t, "b", got)
}
