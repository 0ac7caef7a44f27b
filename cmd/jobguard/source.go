package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/bullmq"
	"github.com/jobguard/jobguard/reclaim/riversource"
)

// queueSource is the source --source names, other than the table: a
// BullMQ queue or River's jobs table. It is nil for the table: reclaim's
// TableSource is the default.
func (c *conns) queueSource(s *settings) (reclaim.Source, error) {
	switch s.Source {
	case sourceBullMQ:
		cfg := s.BullMQ
		cfg.Redis = c.redis
		src, err := bullmq.New(cfg)
		if err != nil {
			return nil, usageErr("--source bullmq: %v", err)
		}
		return src, nil
	case sourceRiver:
		cfg := s.River
		cfg.DB = c.pool
		src, err := riversource.New(cfg)
		if err != nil {
			return nil, usageErr("--source river: %v", err)
		}
		return src, nil
	}
	return nil, nil
}

// errJobNotFound is oneJob's error for a job without a row.
var errJobNotFound = errors.New("job not found")

// oneJob is a source that lists one job: its row, read with the batch
// snapshot a sweep uses, and, over a queue, the queue's listings of it.
// The row's listing lets a plan decide on the row even when no listing of
// the queue names the job, or a TableSource would not list it (within its
// limit, or not running).
type oneJob struct {
	guard *jobguard.Guard
	db    jobguard.DB
	id    string // canonical
	// queue is the queue source, nil for the table; queueTodo says what to
	// check when it cannot be read.
	queue     reclaim.Source
	queueTodo string

	// row is the job's row, once Active has read it.
	row *jobset.Job
	// listings are the queue's listings of the job.
	listings []reclaim.ActiveJob
}

// Active lists the job's row, then the queue's listings of it.
func (o *oneJob) Active(ctx context.Context, q reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	rows, err := jobset.New(o.guard).Snapshot(ctx, o.db, []string{o.id})
	if err != nil {
		return err
	}
	row, ok := rows[o.id]
	if !ok {
		return errJobNotFound
	}
	o.row = &row
	jobs := []reclaim.ActiveJob{{ID: row.ID, Type: row.Type, Row: &row}}
	if o.queue != nil {
		err := o.queue.Active(ctx, q, func(listed []reclaim.ActiveJob) error {
			for _, l := range listed {
				if id, err := o.guard.CanonicalID(l.ID); err == nil && id == o.id {
					o.listings = append(o.listings, l)
				}
			}
			return nil
		})
		if err != nil {
			return readFailed(fmt.Errorf("read the %s source: %w", sourceName(o.queue), err), o.queueTodo)
		}
		jobs = append(jobs, o.listings...)
	}
	return page(jobs)
}

// sourceName names a source for messages.
func sourceName(src reclaim.Source) string {
	switch src.(type) {
	case *bullmq.Source:
		return sourceBullMQ
	case *riversource.Source:
		return sourceRiver
	}
	return sourceTable
}

// queueTodo says what to check when the queue source --source names
// cannot be read: Redis, for BullMQ.
func (c *conns) queueTodo(s *settings) string {
	if s.Source == sourceBullMQ {
		return c.redisTodo
	}
	return ""
}

// readFailed is err, a source that could not be read, with todo when there
// is one.
func readFailed(err error, todo string) error {
	if todo == "" {
		return err
	}
	return fail(exitError, err, "%s", todo)
}

// countPages is src with its listings counted on p (see counted); a
// source that counts its running jobs (a TableSource, whose listings are
// only the overdue ones) still does, for the brake's share caps.
func countPages(src reclaim.Source, p *progress, todo string) reclaim.Source {
	c := counted{Source: src, p: p, todo: todo}
	if _, ok := src.(reclaim.RunningCounter); ok {
		return countedRunning{c}
	}
	return c
}

// countedRunning is a counted source over a reclaim.RunningCounter.
type countedRunning struct{ counted }

// CountRunning is the wrapped source's count.
func (c countedRunning) CountRunning(ctx context.Context) (map[string]int, error) {
	return c.Source.(reclaim.RunningCounter).CountRunning(ctx)
}

// counted is a source whose listings are counted as they pass, for a
// progress line. Its own errors say todo. Build it with countPages.
type counted struct {
	reclaim.Source
	p    *progress
	todo string
}

// Active lists what the source lists, counting each page.
func (c counted) Active(ctx context.Context, q reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	var pageErr error
	err := c.Source.Active(ctx, q, func(jobs []reclaim.ActiveJob) error {
		c.p.add(len(jobs))
		pageErr = page(jobs)
		return pageErr
	})
	if err != nil && err != pageErr {
		return readFailed(err, c.todo)
	}
	return err
}

// CountUnstarted passes the source's count of the jobs it never lists for
// want of a start on, so that the sweep's report has them; a source that
// lists every job it knows has none.
func (c counted) CountUnstarted(ctx context.Context) (int, error) {
	if u, ok := c.Source.(reclaim.UnstartedCounter); ok {
		return u.CountUnstarted(ctx)
	}
	return 0, nil
}
