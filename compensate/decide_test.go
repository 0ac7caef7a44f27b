package compensate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecide_SparesAHeldRefAndLeavesOneBeingRecorded(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                     string
		refLocked, heldElsewhere bool
		want                     decision
	}{
		{"nobody else has the ref: undo it", true, false, undoIt},
		{"another execution may keep it, or did: spare it", true, true, spareIt},
		{"being recorded right now: leave it for the next sweep", false, false, leaveIt},
		{"not locked, whatever was read", false, true, leaveIt},
	} {
		require.Equal(t, c.want, decide(c.refLocked, c.heldElsewhere), c.name)
	}
}
