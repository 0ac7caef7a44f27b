package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
)

var retryCommand = &command{
	name:  "retry",
	args:  "<job-id>",
	short: "an operator's retry of a FAILED job",
	long: `
Retry moves a FAILED job back to QUEUED, as an operator's explicit retry
(jobguard.Guard.Retry): in one conditional statement, only while the job is
FAILED, it clears the failure reason, resets progress and start, and bumps
the generation, so that no execution from before the retry can write again
and an old reclaim marker no longer blocks the job. It prints the new
generation. On a table without a generation column the marker cannot be
told from a fresh one, so it is deleted from Redis as well.

It refuses any job that is not FAILED (exit 4) and changes nothing then. It
does not enqueue the job in a queue: requeue it there as your queue does.

Exit codes: 0 retried, 1 error, 2 a malformed job id, 3 no such job, 4 the
job is not FAILED.`,
	flags: func(f *flags, s *settings) {
		f.commonGroups(s)
		f.outputGroup(s, false)
	},
	run: retry,
}

func retry(ctx context.Context, c *cli, s *settings, args []string) error {
	cn, guard, id, err := c.openJob(ctx, s, "retry", args)
	if err != nil {
		return err
	}
	defer cn.close()
	if err := refuseUnmappedGeneration(guard); err != nil {
		return err
	}
	// Without a generation the marker must go too: check Redis first, so
	// that the retry is not left half done. A marker in Postgres goes in
	// the retry's own transaction.
	pgMarkers := !guard.Fenced() && guard.Shared().Markers == jobguard.MarkersPostgres
	redisMarker := !guard.Fenced() && !pgMarkers
	if redisMarker {
		if err := cn.openRedis(ctx, s, true); err != nil {
			return err
		}
	}
	before, err := jobset.New(guard).Snapshot(ctx, cn.pool, []string{id})
	if err != nil {
		return err
	}
	gen, err := retryRow(ctx, cn, guard, id, pgMarkers)
	if err != nil {
		return err
	}
	if redisMarker {
		if err := deleteRedisMarker(ctx, cn, guard, id); err != nil {
			return err
		}
	}
	return printRetry(c, s, guard, id, before[id], gen, pgMarkers || redisMarker)
}

// refuseUnmappedGeneration refuses a retry that would bump no generation
// on a table that has the column: every execution from before it could
// write again, and that is a mapping mistake, not a status-only table.
func refuseUnmappedGeneration(guard *jobguard.Guard) error {
	for _, u := range guard.Unmapped() {
		if u.Field == "GenerationColumn" {
			return fail(exitError, fmt.Errorf("table %s has a column %q that the mapping leaves out: a retry without it "+
				"would let executions from before the retry write again; nothing was changed",
				guard.Table().QualifiedName(), u.Column),
				"map it with --generation-column %s (the config file's \"table\": {\"generation_column\": %q})", u.Column, u.Column)
		}
	}
	return nil
}

// retryRow retries job id and returns its new generation; with pgMarkers,
// its marker row is deleted in the same transaction. A job that is not
// there, or not FAILED, is refused with its exit code.
func retryRow(ctx context.Context, cn *conns, guard *jobguard.Guard, id string, pgMarkers bool) (gen int64, err error) {
	if pgMarkers {
		markers, merr := marker.NewPostgresStore(guard, marker.Config{})
		if merr != nil {
			return 0, fail(exitError, merr, "")
		}
		err = pgx.BeginFunc(ctx, cn.pool, func(tx pgx.Tx) error {
			if gen, err = guard.Retry(ctx, tx, id); err != nil {
				return err
			}
			return markers.Delete(ctx, tx, id)
		})
	} else {
		gen, err = guard.Retry(ctx, cn.pool, id)
	}
	var se *jobguard.StateError
	switch {
	case errors.As(err, &se) && se.Reason == jobguard.ReasonNotFound:
		return 0, notFound(guard, id)
	case errors.As(err, &se) && se.Reason == jobguard.ReasonStatus:
		return 0, fail(exitRefused, fmt.Errorf("job %s is %s: only a %s job can be retried; nothing was changed",
			id, se.Status, guard.Table().Statuses.Failed), "")
	}
	return gen, err
}

// deleteRedisMarker deletes the reclaim marker of job id, just retried,
// from Redis.
func deleteRedisMarker(ctx context.Context, cn *conns, guard *jobguard.Guard, id string) error {
	markers, err := marker.NewRedisStore(guard, cn.redis, marker.Config{})
	if err != nil {
		return fail(exitError, fmt.Errorf("job %s was retried, but its reclaim marker was not deleted: %w", id, err), "")
	}
	if err := markers.Delete(ctx, id); err != nil {
		return fail(exitError, fmt.Errorf("job %s was retried, but its reclaim marker was not deleted: %w", id, err),
			"the start guard refuses the job while the marker lives: delete key %s in Redis", markers.Key(id))
	}
	return nil
}

// printRetry says what the retry of job id, whose row was prev, changed.
func printRetry(c *cli, s *settings, guard *jobguard.Guard, id string, prev jobset.Job, gen int64, markerDeleted bool) error {
	// A worker may have failed the job with an error that quoted a URL.
	reason := c.red.String(prev.FailureReason)
	if s.JSON {
		out := struct {
			ID                    string `json:"id"`
			Status                string `json:"status"`
			Generation            *int64 `json:"generation"`
			PreviousGeneration    *int64 `json:"previous_generation"`
			PreviousFailureReason string `json:"previous_failure_reason"`
			MarkerDeleted         bool   `json:"marker_deleted"`
		}{ID: id, Status: guard.Table().Statuses.Queued, PreviousFailureReason: reason, MarkerDeleted: markerDeleted}
		if guard.Fenced() {
			out.Generation, out.PreviousGeneration = &gen, &prev.Generation
		}
		return printJSON(c.stdout, out)
	}
	st := guard.Table().Statuses
	if guard.Fenced() {
		fmt.Fprintf(c.stdout, "Job %s: %s -> %s, generation %d -> %d.\n", id, st.Failed, st.Queued, prev.Generation, gen)
	} else {
		fmt.Fprintf(c.stdout, "Job %s: %s -> %s (no generation column); its reclaim marker is deleted.\n", id, st.Failed, st.Queued)
	}
	if reason != "" {
		fmt.Fprintf(c.stdout, "Cleared failure reason: %q.\n", reason)
	}
	fmt.Fprintln(c.stdout, "Enqueue it in your queue again if your queue does not pick QUEUED rows up by itself.")
	return nil
}
