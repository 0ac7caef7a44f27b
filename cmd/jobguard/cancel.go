package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/watch"
)

var cancelCommand = &command{
	name:  "cancel",
	args:  "<job-id>",
	short: "an operator's cancel of a QUEUED or PROCESSING job: stop, and do not retry",
	long: `
Cancel fails a QUEUED or PROCESSING job for good, as an operator's cancel
(jobguard.Guard.Cancel): in one conditional statement it writes FAILED with
the failure reason "<cancelled reason>: <--reason>" and bumps the
generation, so that the running execution can save nothing. The start guard
then refuses the job (jobguard.ErrCancelled, permanent: River cancels it,
asynq archives it), and 'jobguard retry' undoes the cancel.

The workers' watchers cancel the running execution's context at once: the
same statement sends the notice over Postgres LISTEN/NOTIFY, delivered when
it commits; with --notices redis it is published on Redis as well, after the
commit, also when the connection failed before the command heard the commit
(it reads the row back to see). A watcher that hears no notice finds the
cancel at its next check.

It refuses a job that is COMPLETED or FAILED, a cancelled one included (exit
4), and changes nothing then. It does not remove the job from a queue: the
queue is told "do not retry" when it delivers the job.

Exit codes: 0 cancelled, 1 error, 2 a malformed job id, 3 no such job, 4 the
job is not QUEUED or PROCESSING.`,
	flags: func(f *flags, s *settings) {
		f.commonGroups(s)
		f.section("Cancel")
		f.str(&s.Reason, "reason", "why, written after the cancelled reason in the job's failure reason")
		f.str(&s.Notices, "notices", "also publish the notice on Redis: redis (as the workers' watch.Transport); "+
			"off or postgres send only the Postgres notice, which every cancel sends")
		f.outputGroup(s, false)
	},
	run: cancel,
}

func cancel(ctx context.Context, c *cli, s *settings, args []string) error {
	cn, guard, id, err := c.openJob(ctx, s, "cancel", args)
	if err != nil {
		return err
	}
	defer cn.close()
	if err := refuseUnmappedGeneration(guard); err != nil {
		return err
	}
	// Reach Redis before the cancel, so that it is not left unannounced.
	if s.Notices == noticesRedis {
		if err := cn.openRedis(ctx, s, true); err != nil {
			return err
		}
	}
	before, err := jobset.New(guard).Snapshot(ctx, cn.pool, []string{id})
	if err != nil {
		return err
	}
	lost, err := guard.Cancel(ctx, cn.pool, id, s.Reason)
	var se *jobguard.StateError
	if !errors.As(err, &se) && txstate.InDoubt(err) {
		lost, err = settleCancel(ctx, guard, cn.pool, before[id], err)
	}
	if err != nil {
		return cancelRefused(guard, id, before[id], err)
	}
	if s.Notices == noticesRedis {
		pub, err := watch.NewPublisher(guard, watch.Transport{Redis: cn.redis})
		if err == nil {
			err = pub.PublishCancelled(ctx, lost)
		}
		if err != nil {
			return fail(exitError, fmt.Errorf("job %s was cancelled, but its notice was not published on Redis: %w", id, err),
				"the workers' watchers find the cancel at their next check")
		}
	}
	after, err := jobset.New(guard).Snapshot(ctx, cn.pool, []string{id})
	if err != nil {
		return err
	}
	return printCancel(c, s, guard, id, before[id], after[id])
}

// cancelRefused is the command's answer to a cancel that failed with err:
// the job's row was before.
func cancelRefused(guard *jobguard.Guard, id string, before jobset.Job, err error) error {
	var se *jobguard.StateError
	switch {
	case errors.As(err, &se) && se.Reason == jobguard.ReasonNotFound:
		return notFound(guard, id)
	case errors.As(err, &se) && se.Reason == jobguard.ReasonStatus:
		return fail(exitRefused, fmt.Errorf("job %s is %s%s: only a %s or %s job can be cancelled; nothing was changed",
			id, se.Status, alreadyCancelled(guard, before), guard.Table().Statuses.Queued, guard.Table().Statuses.Processing), "")
	}
	return err
}

// settleTimeout bounds the read-back of a cancel whose outcome is in
// doubt: the wait for the transaction that holds the row to end.
const settleTimeout = 10 * time.Second

// settleCancel is what a cancel whose statement was sent, and never
// answered, did (see txstate.InDoubt): it reads the job's row back once the
// transaction holding it has ended, and a row FAILED with the cancelled
// reason at a generation after the one read before the cancel was
// cancelled by it; the execution that lost the job is returned, as Cancel
// returns it. Otherwise the cancel's error is returned.
func settleCancel(ctx context.Context, guard *jobguard.Guard, db jobguard.DB, before jobset.Job, err error) (jobguard.Execution, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	rows, serr := jobset.New(guard).Settled(sctx, db, []string{before.ID})
	if serr != nil {
		return jobguard.Execution{}, errors.Join(err, fmt.Errorf("read back the job whose cancel is in doubt: %w", serr))
	}
	// A start between the read and the cancel moves the generation on
	// (the cancel then fails the execution it started): the cancel is
	// the one that left the row cancelled at a later generation, and the
	// execution that lost the job is the one just before it.
	row, found := rows[before.ID]
	if !found || row.Status != guard.Table().Statuses.Failed || !guard.Shared().Cancelled(row.FailureReason) ||
		row.Generation <= before.Generation {
		return jobguard.Execution{}, err
	}
	return jobguard.Execution{JobID: before.ID, Generation: row.Generation - 1}, nil
}

// alreadyCancelled says so of a row that a cancel already failed.
func alreadyCancelled(guard *jobguard.Guard, row jobset.Job) string {
	if row.Status == guard.Table().Statuses.Failed && guard.Shared().Cancelled(row.FailureReason) {
		return " (cancelled already)"
	}
	return ""
}

// printCancel says what the cancel of job id changed: its row was prev,
// and is now row.
func printCancel(c *cli, s *settings, guard *jobguard.Guard, id string, prev, row jobset.Job) error {
	// The operator's reason may quote a URL.
	reason := c.red.String(row.FailureReason)
	if s.JSON {
		out := struct {
			ID                 string `json:"id"`
			Status             string `json:"status"`
			PreviousStatus     string `json:"previous_status"`
			FailureReason      string `json:"failure_reason"`
			Generation         *int64 `json:"generation"`
			PreviousGeneration *int64 `json:"previous_generation"`
		}{ID: id, Status: row.Status, PreviousStatus: prev.Status, FailureReason: reason}
		if guard.Fenced() {
			out.Generation, out.PreviousGeneration = &row.Generation, &prev.Generation
		}
		return printJSON(c.stdout, out)
	}
	if guard.Fenced() {
		fmt.Fprintf(c.stdout, "Job %s: %s -> %s, generation %d -> %d.\n", id, prev.Status, row.Status, prev.Generation, row.Generation)
	} else {
		fmt.Fprintf(c.stdout, "Job %s: %s -> %s (no generation column: only the status fences the running execution).\n",
			id, prev.Status, row.Status)
	}
	fmt.Fprintf(c.stdout, "Failure reason: %q.\n", reason)
	fmt.Fprintln(c.stdout, "Its running execution, if any, is told to stop; the start guard refuses the job until 'jobguard retry'.")
	return nil
}
