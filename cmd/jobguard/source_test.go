package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// Over a BullMQ queue, explain reads the queue's listing of the job (the
// start of its attempt, processedOn), and says that a job the queue does
// not list is never considered; the dry run lists the queue's jobs.
func TestSource_BullMQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, fixture.Default)
	listed := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	unlisted := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	prefix := b.env.Key("bull")
	started := time.Now().Add(-90 * time.Minute)
	require.NoError(t, b.env.Redis.RPush(ctx, prefix+":chapters:active", "41").Err())
	require.NoError(t, b.env.Redis.HSet(ctx, prefix+":chapters:41", "name", "chapter",
		"processedOn", fmt.Sprint(started.UnixMilli()), "data", `{"jobId": "`+listed+`"}`).Err())
	src := []string{"--source", "bullmq", "--bullmq-queue", "chapters", "--bullmq-prefix", prefix, "--bullmq-row-id-field", "jobId"}

	r := b.run(t, "explain", append([]string{listed}, src...)...)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^queue +listed as active by the bullmq source, attempt started \S+$`, r.stdout)
	require.Regexp(t, `(?m)^why +runtime 1h30m\d+s > limit 30m0s and no progress for 2h0m\d+s`, r.stdout,
		"the queue's start is the later, so it counts")

	r = b.run(t, "explain", append([]string{unlisted, "--json"}, src...)...)
	require.Equal(t, 0, r.code, r)
	var e struct {
		Listed   *bool  `json:"listed"`
		Decision string `json:"decision"`
		Why      string `json:"why"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r)
	require.False(t, *e.Listed)
	require.Equal(t, "not_listed", e.Decision)
	require.Contains(t, e.Why, "the bullmq source does not list it as active: a sweep over it never considers this job")

	r = b.run(t, "sweep", append([]string{"--dry-run"}, src...)...)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, listed)
	require.NotContains(t, r.stdout, unlisted)
	require.Contains(t, r.stdout, "1 listed: 1 reclaim.")
}

// Over River, the source reads River's jobs table: the running jobs, their
// attempted_at and the row id in their args.
func TestSource_River(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	stuck := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	// The columns of River's river_job that the source reads.
	b.env.Exec(`CREATE TABLE river_job (id bigserial PRIMARY KEY, kind text NOT NULL, queue text NOT NULL DEFAULT 'default',
		state text NOT NULL, attempted_at timestamptz, args jsonb NOT NULL)`)
	b.env.Exec(`INSERT INTO river_job (kind, state, attempted_at, args) VALUES
		('chapter_args', 'running', now() - interval '45 minutes', jsonb_build_object('job_id', $1::text)),
		('other_args', 'running', now() - interval '45 minutes', '{}')`, stuck)

	r := b.run(t, "sweep", "--dry-run", "--source", "river", "--river-kinds", "chapter_args=chapter")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^`+stuck+` +chapter +45m\d+s +30m0s +2h0m\d+s +reclaim `, r.stdout)
	require.Contains(t, r.stdout, "1 listed: 1 reclaim.", "other kinds are not read")

	r = b.run(t, "explain", stuck, "--source", "river", "--river-kinds", "chapter_args=chapter")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^queue +listed as active by the river source`, r.stdout)
	require.Regexp(t, `(?m)^decision +reclaim$`, r.stdout)
}
