package usage_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

func TestEntryValidate(t *testing.T) {
	t.Parallel()
	ok := usage.Entry{Account: "acct", Meter: "video_ms", Quantity: 0}
	require.NoError(t, ok.Validate())
	for want, e := range map[string]usage.Entry{
		"Account is empty":                          {Meter: "m", Quantity: 1},
		"Meter is empty":                            {Account: "a", Quantity: -1},
		"Quantity -1 is negative":                   {Account: "a", Meter: "m", Quantity: -1},
		"Account: jobguard: value cannot be stored": {Account: "a\x00", Meter: "m"},
		"Meter: jobguard: value cannot be stored":   {Account: "a", Meter: "m\xff"},
	} {
		require.ErrorContains(t, e.Validate(), want)
	}
	require.ErrorIs(t, usage.Entry{Account: "a", Meter: "m\x00"}.Validate(), jobguard.ErrUnstorable)
}

func TestCheckMeter(t *testing.T) {
	t.Parallel()
	require.NoError(t, usage.CheckMeter("video_ms"))
	require.EqualError(t, usage.CheckMeter(""), "meter is empty")
	require.ErrorIs(t, usage.CheckMeter("m\x00"), jobguard.ErrUnstorable)
}

func TestEntryAttributesJSON(t *testing.T) {
	t.Parallel()
	for _, none := range []map[string]any{nil, {}} {
		b, err := usage.Entry{Attributes: none}.AttributesJSON()
		require.NoError(t, err)
		require.Nil(t, b, "no attributes, however spelled, are none")
	}
	b, err := usage.Entry{Attributes: map[string]any{"model": "m1", "n": json.Number("1.50")}}.AttributesJSON()
	require.NoError(t, err)
	require.JSONEq(t, `{"model":"m1","n":1.50}`, string(b))
	_, err = usage.Entry{Attributes: map[string]any{"k": "a\x00"}}.AttributesJSON()
	require.ErrorIs(t, err, jobguard.ErrUnstorable)
	require.ErrorContains(t, err, "Attributes: ")
}
