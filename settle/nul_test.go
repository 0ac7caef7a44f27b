package settle_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// A string holding U+0000 is a Go string like any other, and encoding/json
// writes it as valid JSON ("\u0000"). Arguments and attributes that hold
// one are stored in the record as JSON, as any others are: the finalize
// completes its job, its handler gets the arguments it was given, and the
// entry is billed.
func TestFinalize_ArgumentsAndAttributesWithNULCompleteAndSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	e := &echo{}
	s := b.settler(t, quick(settle.Config{
		Handlers:   map[string]settle.Handler{"echo": e.handler},
		Increments: map[string]settle.Increment{"units": bill},
	}))
	const nul = "take\x00two"
	for _, c := range []struct {
		name string
		spec settle.Spec
	}{
		{"args", settle.Spec{Updates: []settle.Update{{Name: "echo", Args: map[string]string{"caption": nul}}}}},
		{"attributes", settle.Spec{Usage: []usage.Entry{{Account: "acct-1", Meter: "units", Quantity: 1,
			Attributes: map[string]any{"caption": nul}}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			exec, _ := b.video(t, 1)
			res, err := s.Finalize(ctx, b.env.Pool, exec, c.spec)
			require.NoError(t, err, "the finalize of a valid spec failed; job status %s", b.jobs.Read(t, exec.JobID).Status)
			require.True(t, res.Settled)
			if c.spec.Updates != nil {
				runs := e.runs(exec.JobID)
				require.Len(t, runs, 1)
				var got map[string]string
				require.NoError(t, json.Unmarshal([]byte(runs[0]), &got))
				require.Equal(t, nul, got["caption"], "the handler got other arguments")
			}
		})
	}
}
