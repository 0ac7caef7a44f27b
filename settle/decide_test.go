package settle

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPolicy_After(t *testing.T) {
	t.Parallel()
	p := policy{maxAttempts: 4, backoffMin: time.Second, backoffMax: 5 * time.Second}
	for _, tc := range []struct {
		name    string
		attempt int
		o       outcome
		want    verdict
	}{
		{"settled on the first attempt", 1, settled, verdict{}},
		{"settled on the last attempt", 4, settled, verdict{}},
		{"first failure waits backoffMin", 1, failed, verdict{retryIn: time.Second}},
		{"second failure waits twice as long", 2, failed, verdict{retryIn: 2 * time.Second}},
		{"third failure waits four times as long", 3, failed, verdict{retryIn: 4 * time.Second}},
		{"the last attempt's failure gives up", 4, failed, verdict{giveUp: true}},
		{"a job not completed by the execution gives up at once", 1, notCompleted, verdict{giveUp: true}},
		{"an attempt beyond the last gives up", 5, exhausted, verdict{giveUp: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, p.after(tc.attempt, tc.o))
		})
	}
}

func TestPolicy_Runs(t *testing.T) {
	t.Parallel()
	p := policy{maxAttempts: 3}
	require.True(t, p.runs(1))
	require.True(t, p.runs(3))
	require.False(t, p.runs(4), "a sweep that died during the last attempt leaves nothing more to try")
}

func TestPolicy_BackoffDoublesUpToItsCap(t *testing.T) {
	t.Parallel()
	p := policy{maxAttempts: 100, backoffMin: 30 * time.Second, backoffMax: time.Hour}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute,
		16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	for i, w := range want {
		require.Equal(t, w, p.backoff(i+1), "attempt %d", i+1)
	}
	require.Equal(t, time.Hour, p.backoff(1000), "no overflow however many attempts")
}

func TestPolicy_BackoffNeverWrapsNearTheLongestDuration(t *testing.T) {
	t.Parallel()
	longest := time.Duration(math.MaxInt64)
	for _, p := range []policy{
		{maxAttempts: 100, backoffMin: longest / 3, backoffMax: longest},
		{maxAttempts: 100, backoffMin: longest/2 + 1, backoffMax: longest},
		{maxAttempts: 100, backoffMin: time.Second, backoffMax: longest},
		{maxAttempts: 100, backoffMin: longest, backoffMax: longest},
	} {
		prev := time.Duration(0)
		for n := 1; n <= 100; n++ {
			d := p.backoff(n)
			require.GreaterOrEqual(t, d, prev, "attempt %d of %+v", n, p)
			require.LessOrEqual(t, d, p.backoffMax)
			prev = d
		}
		require.Equal(t, longest, p.backoff(100), "%+v", p)
	}
}
