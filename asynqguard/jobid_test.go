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
		{name: "key missing", payload: `{"weeks": 2}`, err: `the payload does not name a row: no key "job_id"`},
		{name: "empty object", payload: `{}`, err: `the payload does not name a row: no key "job_id"`},
		{name: "null payload", payload: `null`, err: `the payload does not name a row: no key "job_id"`},
		{name: "empty payload", payload: ``, err: "the payload does not name a row: not JSON"},
		{name: "not JSON", payload: `job_id=1`, err: "the payload does not name a row: not JSON"},
		{name: "an array, which has no keys, as for jsonb", payload: `[1]`, err: `no key "job_id"`},
		{name: "null", payload: `{"job_id": null}`, err: `"job_id" is a JSON null`},
		{name: "empty string", payload: `{"job_id": ""}`, err: `"job_id" is an empty string`},
		{name: "fraction", payload: `{"job_id": 4.5}`, err: `"job_id" is 4.5; want a string or an integer`},
		{name: "bool", payload: `{"job_id": true}`, err: `"job_id" is a JSON boolean; want a string or an integer`},
		{name: "object", payload: `{"job_id": {"id": 1}}`, err: `"job_id" is a JSON object; want a string or an integer`},
		{name: "long value is cut", payload: `{"job_id": 1234567890123456789012345678901234567890123.5}`, err: `"job_id" is 1234567890123456789012345678901234567890…; want a string`},
		{name: "an array is not shown", payload: `{"job_id": ["xααααααααααααααααααααα"]}`, err: `"job_id" is a JSON array; want a string`},
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
