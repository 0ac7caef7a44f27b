package compensate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/retain"
)

// Two executions of one job record the same thing (a path per job). The
// first is lost: its artifact is compensated, and its recheck, once the
// second execution has completed with the thing, is spared. The retention
// sweep then removes the second execution's kept artifact, as no sibling
// is pending, owed or awaiting a recheck. When the lost execution's late
// Finalize is rejected, its compensation must still spare the thing: it
// is the completed execution's output.
func TestRetention_KeptArtifactStillSparesALaterRejectedExecution(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	arts, err := compensate.New(ctx, compensate.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool, RecheckAfter: 300 * time.Millisecond,
		Compensators: map[string]compensate.Func{"file": b.files.compensate},
	})
	require.NoError(t, err)

	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	ref := fmt.Sprintf("videos/%s.mp4", id)
	lost := jobguard.Execution{JobID: id, Generation: 1}
	require.NoError(t, arts.Record(ctx, b.env.Pool, lost, "file", ref))

	// The job is restarted at generation 2: the lost execution's artifact
	// is owed and compensated (nothing else holds the thing yet).
	b.restart(t, id, 2)
	rep, err := arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Compensated)

	// Generation 2 records the same thing, creates it and completes.
	winner := jobguard.Execution{JobID: id, Generation: 2}
	require.NoError(t, arts.Record(ctx, b.env.Pool, winner, "file", ref))
	fin, err := arts.Finalize(ctx, b.env.Pool, winner, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	require.True(t, fin.Completed())
	require.Equal(t, map[string]string{ref: "kept"}, b.states(t, winner))

	// The lost execution's recheck comes due: the thing is the winner's
	// now, so it is spared.
	time.Sleep(400 * time.Millisecond)
	rep, err = arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Spared)
	require.Equal(t, map[string]string{ref: "done"}, b.states(t, lost))
	require.Equal(t, 1, b.files.undoneRefs()[ref], "the winner's thing has not been touched")

	// Time passes (the kept artifact finished before the lost one was
	// spared), and the retention sweep runs with an age of an hour.
	b.env.Exec(`ALTER TABLE job_artifacts DISABLE TRIGGER changed_at_follows_changes`)
	b.env.Exec(`UPDATE job_artifacts SET changed_at = now() - interval '2 hours' WHERE generation = 2`)
	b.env.Exec(`UPDATE job_artifacts SET changed_at = now() - interval '30 minutes' WHERE generation = 1`)
	b.env.Exec(`ALTER TABLE job_artifacts ENABLE TRIGGER changed_at_follows_changes`)
	sw, err := retain.New(retain.Config{DB: b.env.Pool, Tables: []retain.Table{{Rule: arts.Retention(), Age: time.Hour}}})
	require.NoError(t, err)
	srep, err := sw.Sweep(ctx)
	require.NoError(t, err)
	t.Logf("retention removed %d artifact(s); winner's now %v, lost's %v",
		srep.Tables[0].Removed, b.states(t, winner), b.states(t, lost))

	// The lost execution finally returns and finalizes: rejected.
	fin, err = arts.Finalize(ctx, b.env.Pool, lost, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.True(t, fin.Rejected())
	require.Equal(t, 1, b.files.undoneRefs()[ref],
		"the lost execution's compensation removed %s, the completed generation's output", ref)
}
