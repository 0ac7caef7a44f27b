package settle_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// An increment that panics with the error its own statement returned
// (panic(err), as a must-style helper does), here the server's
// deadlock_detected, panics all the same: Finalize leaves the record
// pending for the sweep and returns ErrPending wrapping the
// *jobguard.PanicError, as for any other panic of an increment.
func TestFinalize_IncrementThatPanicsWithADeadlockErrorLeavesThePendingRecordToTheSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec, spec := b.video(t, 5000)
	var calls atomic.Int32
	incs := increments(nil)
	inner := incs["video_ms"]
	incs["video_ms"] = func(ctx context.Context, tx pgx.Tx, exec jobguard.Execution, e usage.Entry) error {
		if calls.Add(1) == 1 {
			_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'deadlock detected' USING ERRCODE = 'deadlock_detected'; END $$`)
			if err != nil {
				panic(err)
			}
		}
		return inner(ctx, tx, exec, e)
	}
	s := b.settler(t, quick(settle.Config{Increments: incs}))

	var res settle.Result
	var err error
	require.NotPanics(t, func() { res, err = s.Finalize(ctx, b.env.Pool, exec, spec) })
	t.Logf("increment calls: %d; settled: %v; err: %v", calls.Load(), res.Settled, err)
	require.ErrorIs(t, err, settle.ErrPending, "the increment panicked")
	var pe *jobguard.PanicError
	require.ErrorAs(t, err, &pe)
	require.False(t, res.Settled)
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	require.Contains(t, rec.Error, "panic: ")
	require.Equal(t, int32(1), calls.Load(), "a panic is not tried again at once")
}
