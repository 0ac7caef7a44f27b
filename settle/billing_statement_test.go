package settle_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// Meters whose names an array's text form must quote (NULL, commas,
// braces, quotes, backslashes, spaces, long names), with zero and the
// largest quantity, are each billed once, in either protocol: the meters
// of the new ledger rows come back from the billing statement as an
// array, and each is matched to its entry by name.
func TestFinalize_MetersAnArrayMustQuoteAreEachBilledOnce(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		name := "extended"
		if simple {
			name = "simple-protocol"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, testenv.Config{SimpleProtocol: simple})
			ctx := context.Background()
			meters := []string{"NULL", "null", "a,b", "{x}", `"q"`, `back\slash`, " sp ", "é", strings.Repeat("m", 1000), "video_ms"}
			var mu sync.Mutex
			ran := map[string]int{}
			incs := map[string]settle.Increment{}
			for _, m := range meters {
				incs[m] = func(_ context.Context, _ pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
					mu.Lock()
					defer mu.Unlock()
					ran[e.Meter]++
					return nil
				}
			}
			s := b.settler(t, quick(settle.Config{Increments: incs}))
			exec, spec := b.video(t, 5)
			spec.Usage = nil
			for i, m := range meters {
				q := int64(i)
				if i == 3 {
					q = math.MaxInt64
				}
				spec.Usage = append(spec.Usage, usage.Entry{Account: "acct-1", Meter: m, Quantity: q, Attributes: map[string]any{"n": i}})
			}
			res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
			require.NoError(t, err)
			require.True(t, res.Settled)
			require.Len(t, res.Accruals, len(meters))
			for i, a := range res.Accruals {
				require.True(t, a.Accrued, "meter %q", meters[i])
				require.Equal(t, spec.Usage[i].Quantity, a.Entry.Quantity)
			}
			for _, m := range meters {
				require.Equal(t, 1, ran[m], "increments of meter %q", m)
			}
			require.Equal(t, len(meters), b.billed(t, exec).LedgerRows)
		})
	}
}

// Finalizes and two sweeps racing to bill jobs of three meters, whose
// increments fail or panic at their first run (after the billing
// statement inserted the ledger rows), bill each meter of each job once:
// a failed billing leaves neither its ledger rows nor its increments.
func TestSweep_RacingBillersWithFailingIncrementsBillEachMeterOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.env.Exec(`CREATE TABLE increments (job_id text, meter text, quantity bigint)`)
	var mu sync.Mutex
	tried := map[string]bool{}
	meters := []string{"calls", "tokens", "frames"}
	incs := map[string]settle.Increment{}
	for i, m := range meters {
		incs[m] = func(ctx context.Context, tx pgx.Tx, exec jobguard.Execution, e usage.Entry) error {
			if _, err := tx.Exec(ctx, `INSERT INTO increments VALUES ($1, $2, $3)`, exec.JobID, e.Meter, e.Quantity); err != nil {
				return err
			}
			mu.Lock()
			first := !tried[exec.JobID+"/"+e.Meter]
			tried[exec.JobID+"/"+e.Meter] = true
			mu.Unlock()
			switch {
			case first && i == 1:
				return errors.New("store unavailable")
			case first && i == 2:
				panic("increment broke")
			}
			return nil
		}
	}
	cfg := quick(settle.Config{Increments: incs, Logger: discard(), MaxAttempts: 100})
	s, s2 := b.settler(t, cfg), b.settler(t, cfg)
	var execs []jobguard.Execution
	for range 20 {
		exec, _ := b.video(t, 5)
		execs = append(execs, exec)
	}
	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	for _, sw := range []*settle.Settler{s, s2} {
		sweeps.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					_, _ = sw.Sweep(ctx)
				}
			}
		})
	}
	var finalizes sync.WaitGroup
	for i, exec := range execs {
		finalizes.Go(func() {
			var entries []usage.Entry
			for j, m := range meters {
				entries = append(entries, usage.Entry{Account: "acct-1", Meter: m, Quantity: int64(10*i + j)})
			}
			_, _ = s.Finalize(ctx, b.env.Pool, exec, settle.Spec{Usage: entries})
		})
	}
	finalizes.Wait()
	close(stop)
	sweeps.Wait()
	b.settleAll(t, s)
	for i, exec := range execs {
		rec, _ := b.record(t, exec)
		require.Equal(t, "confirmed", rec.State)
		for j, m := range meters {
			var runs, rows int
			var total int64
			require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM increments WHERE job_id = $1 AND meter = $2),
				(SELECT coalesce(sum(quantity), 0) FROM increments WHERE job_id = $1 AND meter = $2),
				(SELECT count(*) FROM usage_ledger WHERE job_id = $1 AND meter = $2)`, exec.JobID, m).Scan(&runs, &total, &rows))
			require.Equal(t, 1, runs, "job %d meter %s: committed increments", i, m)
			require.Equal(t, int64(10*i+j), total)
			require.Equal(t, 1, rows, "job %d meter %s: ledger rows", i, m)
		}
	}
}
