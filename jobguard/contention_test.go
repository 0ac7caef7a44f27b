package jobguard_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// Several connections race a completion against a conditional fail of the
// same execution, 200 times over: only a real conditional UPDATE under real
// row locks can show that exactly one wins every round.
func TestCompleteIfActive_RaceAgainstFailHasExactlyOneWinner(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	const rounds, completers, failers = 200, 3, 3

	// Hold one connection per racer so that every racer really is a separate
	// database session.
	racers := env.Connect(testenv.Config{MaxConns: completers + failers})
	conns := make([]jobguard.DB, completers+failers)
	for i := range conns {
		c, err := racers.Acquire(ctx)
		require.NoError(t, err)
		t.Cleanup(c.Release)
		conns[i] = c.Conn()
	}

	wins := map[string]int{}
	for round := range rounds {
		id := jobs.Insert(t, fixture.Job{Generation: 1})
		exec := jobguard.Execution{JobID: id, Generation: 1}
		start := make(chan struct{})
		type outcome struct {
			who string
			err error
		}
		results := make(chan outcome, len(conns))
		var wg sync.WaitGroup
		for i, db := range conns {
			wg.Go(func() {
				<-start
				if i < completers {
					results <- outcome{"complete", jobs.Guard.CompleteIfActive(ctx, db, exec)}
				} else {
					results <- outcome{"fail", jobs.Guard.Fail(ctx, db, exec, jobguard.ReclaimedReasonDefault)}
				}
			})
		}
		close(start)
		wg.Wait()
		close(results)

		winner := ""
		for r := range results {
			if r.err == nil {
				require.Empty(t, winner, "round %d: two winners", round)
				winner = r.who
				continue
			}
			require.ErrorIs(t, r.err, jobguard.ErrJobTerminal, "round %d", round)
		}
		require.NotEmpty(t, winner, "round %d: nobody won", round)
		want := map[string]string{"complete": "COMPLETED", "fail": "FAILED"}[winner]
		require.Equal(t, want, jobs.Read(t, id).Status, "round %d", round)
		wins[winner]++
	}
	t.Logf("winners over %d rounds: %v", rounds, wins)
}
