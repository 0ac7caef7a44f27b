package flow

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// Chapters is the "add weeks to a course" processor.
//
// The order is the point: start the job as a new execution (the start guard
// refuses a reclaimed job), make the slow model call outside any
// transaction, then save in one short transaction whose first write is the
// conditional completion. A job that was reclaimed while the model was
// thinking is refused right there, before any chapter row exists, and the
// rollback takes nothing with it. With a Watcher, the model call of a
// reclaimed job is cancelled as soon as the reclaim's notice arrives, so it
// stops costing money; the refused save remains the guarantee when the
// notice is late or the call ignores its context.
type Chapters struct {
	// Guard guards the jobs table: it completes the jobs (the save's first
	// write) and fails them.
	Guard *jobguard.Guard
	// Starts starts each delivery as a new execution, and refuses a job
	// that was reclaimed.
	Starts *jobguard.StartGuard
	// DB reaches the jobs and the course tables, such as the process's
	// pool.
	DB jobguard.DB
	// Watcher cancels the model call of an execution that lost its job.
	// Nil runs without one: the call runs until it returns, and only the
	// guarded save refuses what follows, as in a worker that receives no
	// notices.
	Watcher *watch.Watcher
	// Model writes the weeks.
	Model sim.Model
}

// ChapterResult is what a successful chapter job added.
type ChapterResult struct {
	// CourseID is the course the job added weeks to.
	CourseID string
	// Weeks is the number of weeks added.
	Weeks int
	// Total is the course's week count afterwards.
	Total int
}

// EnqueueChapter queues a job that adds weeks to course and marks the course
// GENERATING. It returns the job id.
func EnqueueChapter(ctx context.Context, db jobguard.DB, courseID string, weeks int) (string, error) {
	var id string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO jobs (type, parent_id, payload)
			VALUES ($1, $2, jsonb_build_object('weeks', $3::int)) RETURNING id::text`,
			TypeChapter, courseID, weeks).Scan(&id); err != nil {
			return err
		}
		return setStatus(ctx, tx, `UPDATE courses SET status = 'GENERATING' WHERE id = $1`, courseID)
	})
	if err != nil {
		return "", fmt.Errorf("enqueue chapter job for course %s: %w", courseID, err)
	}
	return id, nil
}

// Process runs one delivery of a chapter job.
func (c *Chapters) Process(ctx context.Context, jobID string) (ChapterResult, error) {
	// 1. Start: refused (permanently) if the job was reclaimed; otherwise a
	// new execution with its own generation.
	exec, err := c.Starts.Start(ctx, c.DB, jobID)
	if err != nil {
		return ChapterResult{}, fmt.Errorf("chapter: %w", err)
	}
	return c.ProcessStarted(ctx, exec)
}

// ProcessStarted runs a delivery whose execution is already started, by a
// queue's middleware such as riverguard's: Process after its start, so it
// needs no Starts. When the middleware watches the execution, leave Watcher
// nil: ctx is then the watcher's context, and a model call it cancels is
// recognised all the same.
func (c *Chapters) ProcessStarted(ctx context.Context, exec jobguard.Execution) (ChapterResult, error) {
	var res ChapterResult
	var title string
	var existing, weeks int
	err := c.DB.QueryRow(ctx, `SELECT c.id, c.title, c.weeks, (j.payload->>'weeks')::int
		FROM jobs j JOIN courses c ON c.id = j.parent_id WHERE j.id = $1`, exec.JobID).
		Scan(&res.CourseID, &title, &existing, &weeks)
	if err != nil {
		return res, giveUp(ctx, c.Guard, c.DB, exec, fmt.Errorf("chapter: read course: %w", err), "chapter: course unreadable")
	}

	// 2. The model call: slow and external, so outside any transaction, and
	// under the watcher's context, which is cancelled as soon as the job is
	// reclaimed: the call stops instead of running to a refused save.
	runCtx, release := watched(ctx, c.Watcher, exec)
	defer release()
	generated, err := c.Model.Generate(runCtx, title, existing+1, weeks)
	if lost := reclaimed(runCtx); err != nil && lost != nil {
		// The reclaimer already failed the job: nothing to save or fail.
		return res, fmt.Errorf("chapter: model call cancelled: %w", lost)
	}
	if err != nil {
		return res, giveUp(ctx, c.Guard, c.DB, exec, fmt.Errorf("chapter: %w", err), err.Error())
	}

	// 3. The save: the conditional completion is the transaction's first
	// write. If the job was reclaimed meanwhile it returns ErrJobTerminal,
	// the function below never runs, and nothing is written.
	err = c.Guard.CompleteTx(ctx, c.DB, exec, func(tx pgx.Tx) error {
		for _, w := range generated {
			existing++
			var chapterID int64
			if err := tx.QueryRow(ctx, `INSERT INTO chapters (course_id, job_id, generation, week, title)
				VALUES ($1, $2, $3, $4, $5) RETURNING id`,
				res.CourseID, exec.JobID, exec.Generation, existing, w.Title).Scan(&chapterID); err != nil {
				return fmt.Errorf("chapter: insert chapter: %w", err)
			}
			for li, l := range w.Lessons {
				var lessonID int64
				if err := tx.QueryRow(ctx, `INSERT INTO lessons (chapter_id, position, title)
					VALUES ($1, $2, $3) RETURNING id`, chapterID, li+1, l.Title).Scan(&lessonID); err != nil {
					return fmt.Errorf("chapter: insert lesson: %w", err)
				}
				for ki, k := range l.Lectures {
					if _, err := tx.Exec(ctx, `INSERT INTO lectures (lesson_id, position, title, body)
						VALUES ($1, $2, $3, $4)`, lessonID, ki+1, k.Title, k.Body); err != nil {
						return fmt.Errorf("chapter: insert lecture: %w", err)
					}
				}
			}
		}
		if err := tx.QueryRow(ctx, `UPDATE courses SET weeks = weeks + $2, status = 'READY'
			WHERE id = $1 RETURNING weeks`, res.CourseID, len(generated)).Scan(&res.Total); err != nil {
			return fmt.Errorf("chapter: update course: %w", err)
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("chapter: save: %w", err)
	}
	res.Weeks = len(generated)
	return res, nil
}

// setStatus runs a one-row status update and fails when no row matched.
func setStatus(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%d rows matched %v", tag.RowsAffected(), args)
	}
	return nil
}
