package heartbeat

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// An interval past half the longest duration still throttles each job for
// a whole interval: the generations' rotation must not wrap twice the
// interval into a negative age and drop the slots of jobs claimed less
// than an interval ago.
func TestLimiter_LongestIntervalsStillThrottleForAWholeInterval(t *testing.T) {
	t.Parallel()
	for _, iv := range []int64{math.MaxInt64/2 + 1, math.MaxInt64 - 1} {
		l := newLimiter(iv, 0)
		require.True(t, l.claim("a", 0))
		l.release("a")
		require.True(t, l.claim("b", iv/2))
		l.release("b")
		require.True(t, l.claim("c", iv)) // rotates: a and b move to the old generation
		l.release("c")
		require.True(t, l.throttled("b", iv+1), "interval %d", iv)
		require.False(t, l.claim("b", iv+1), "b was claimed less than an interval ago, interval %d", iv)
	}
}
