package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
)

// finalRows prints the rows the story left behind, table by table.
func (d *demo) finalRows(ctx context.Context) error {
	d.tl.heading("Final rows")
	for _, t := range []struct{ title, sql string }{
		{"jobs", `SELECT left(id::text, 8) AS id, type, parent_id AS parent, status, generation AS gen,
			coalesce(failure_reason, '') AS failure_reason
			FROM jobs ORDER BY created_at, id`},
		{"parents", `SELECT 'course' AS kind, id, status, weeks::text || ' week(s)' AS detail FROM courses
			UNION ALL SELECT 'video', id, status, coalesce(duration_seconds::text || ' s', '') FROM videos
			UNION ALL SELECT 'asset', id, status, 'generation ' || generation FROM assets
			ORDER BY 1, 2`},
		{"chapters", `SELECT c.course_id AS course, c.week, c.title, left(c.job_id::text, 8) AS job, c.generation AS gen,
			(SELECT count(*) FROM lessons l WHERE l.chapter_id = c.id) AS lessons,
			(SELECT count(*) FROM lectures k JOIN lessons l ON l.id = k.lesson_id WHERE l.chapter_id = c.id) AS lectures
			FROM chapters c ORDER BY c.course_id, c.week`},
		{"usage ledger", `SELECT left(job_id, 8) AS job, meter, account, quantity, generation AS gen FROM usage_ledger
			ORDER BY recorded_at`},
		{"accounts", `SELECT id, video_seconds FROM accounts ORDER BY id`},
		{"artifacts", `SELECT left(job_id, 8) AS job, generation AS gen, kind,
			CASE kind WHEN 'file' THEN regexp_replace(ref, '^.*/', '') ELSE ref END AS ref, state, attempts FROM job_artifacts ORDER BY id`},
	} {
		if err := d.table(ctx, t.title, t.sql); err != nil {
			return fmt.Errorf("%s: %w", t.title, err)
		}
	}
	return nil
}

// table prints the result of sql under title, aligned.
func (d *demo) table(ctx context.Context, title, sql string) error {
	rows, err := d.w.pool.Query(ctx, sql)
	if err != nil {
		return err
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	var head []string
	for _, f := range rows.FieldDescriptions() {
		head = append(head, f.Name)
	}
	fmt.Fprintf(w, "    %s\n", strings.Join(head, "\t"))
	n, err := printRows(w, rows)
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	d.tl.say("  %s (%d)", title, n)
	if n > 0 {
		d.tl.say("%s", strings.TrimRight(b.String(), "\n"))
	}
	return nil
}

func printRows(w *tabwriter.Writer, rows pgx.Rows) (int, error) {
	defer rows.Close()
	n := 0
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return n, err
		}
		cells := make([]string, len(vals))
		for i, v := range vals {
			if v == nil {
				cells[i] = ""
			} else {
				cells[i] = fmt.Sprint(v)
			}
		}
		fmt.Fprintf(w, "    %s\n", strings.Join(cells, "\t"))
		n++
	}
	return n, rows.Err()
}
