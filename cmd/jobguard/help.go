package main

import (
	"fmt"
	"io"
	"strings"
)

const helpIntro = `jobguard is the operator's tool for jobguard's guards on a jobs table: it
says what the reclaimer would do with a job and why, runs sweeps, keeps the
runtime limit of each job type, retries failed jobs, and runs the reclaimer
as a service.

Usage:
  jobguard <command> [flags] [arguments]

Commands:
`

const helpOutro = `
Every command takes --help. Settings come from the flags, else a JSON config
file (--config, or JOBGUARD_CONFIG; 'jobguard help config'), else the
defaults, which are the bundled migrations' table and the library's own.
The servers: --database-url (JOBGUARD_DATABASE_URL) and --redis-url
(JOBGUARD_REDIS_URL), which is needed only for --markers redis
(JOBGUARD_MARKERS), --notices redis or --source bullmq.

Exit codes:
  0  done
  1  error: a server, the table mapping, a write (the message says what to do)
  2  usage: an unknown command or flag, a missing or malformed argument
     (a job id that the id column cannot hold)
  3  the job does not exist in the mapped table
  4  refused: the job's status does not allow it (retry of a job that is
     not FAILED, cancel of one that is not QUEUED or PROCESSING)
`

const helpConfig = `The config file (--config FILE, or JOBGUARD_CONFIG) is JSON. Every field is
optional: one left out keeps its default, and flags override the file. An
unknown field is an error. The servers' URLs are not in it: they hold
passwords; give them in the environment.

"table" is a jobguard.Table, read as the library reads one: a required
column left out (id, status, updated_at, failure_reason) takes its default
name; an optional one (generation, progress, type, parent id, started at)
is absent unless named. Without "table" and without any table flag, the
table is the bundled migration's (jobguard.DefaultTable). A column under an
optional column's default name ("generation", "progress", "type",
"parent_id", "started_at") that the mapping leaves out is warned of.

A Prisma-style table:

  {
    "table": {
      "schema": "public",
      "name": "CourseJob",
      "id_column": "id",
      "status_column": "status",
      "updated_at_column": "updatedAt",
      "failure_reason_column": "failureReason",
      "generation_column": "generation",
      "progress_column": "progress",
      "type_column": "kind",
      "parent_id_column": "courseId",
      "started_at_column": "startedAt",
      "statuses": {"queued": "QUEUED", "processing": "PROCESSING",
                   "completed": "COMPLETED", "failed": "FAILED"}
    },
    "shared": {
      "prefix": "jobguard",
      "reclaimed_reason": "reclaimed: exceeded runtime limit without progress",
      "cancelled_reason": "cancelled by operator",
      "notice_channel": "jobguard_reclaim_notices",
      "leader_key": 29958816148054892,
      "markers": "postgres"
    },
    "limits": {"schema": "", "table": "job_type_limits"},
    "reclaim": {"no_progress": "15m", "interval": "1m", "sweep_timeout": "1m",
                "page_size": 10000, "notices": "off"},
    "source": {
      "kind": "table",
      "bullmq": {"queue": "chapters", "prefix": "bull", "row_id_field": "jobId",
                 "generation_field": ""},
      "river": {"schema": "", "row_id_key": "job_id", "queues": ["default"],
                "kinds": {"chapter_args": "chapter"}}
    },
    "parent_rules": {
      "chapter": {"table": "Course", "id_column": "id", "column": "status",
                  "value": "FAILED", "from": ["GENERATING"]}
    }
  }

shared must match what the workers' guards use (jobguard.Shared): the start
guard reads the markers where "markers" says (postgres: the table
job_reclaim_markers, which jobguard/marker.Migration creates; redis: under
"prefix") and the failure reason
"reclaimed_reason" or begins with "cancelled_reason"; the reclaimers of one jobs table elect their leader on
"leader_key". parent_rules are reclaim.SetParent rules, by job type: when a
job of that type is reclaimed, its parent row's column is set to value, only
from the values in from, in the reclaim's transaction.
`

// help writes the list of commands.
func (c *cli) help(w io.Writer) {
	fmt.Fprint(w, helpIntro)
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  %-30s %s\n", strings.TrimSpace(cmd.name+" "+cmd.args), cmd.short)
	}
	fmt.Fprintf(w, "  %-30s %s\n", "help [command | config]", "help for a command, or the config file's format")
	fmt.Fprint(w, helpOutro)
}

// helpCommand is 'jobguard help [topic]'.
func (c *cli) helpCommand(args []string) int {
	topic := strings.Join(args, " ")
	switch topic {
	case "":
		c.help(c.stdout)
		return exitOK
	case "config":
		fmt.Fprint(c.stdout, helpConfig)
		return exitOK
	}
	cmd, _, err := find(args)
	if err != nil {
		return c.report(nil, err)
	}
	s := defaultSettings()
	f := newFlags("jobguard " + cmd.name)
	cmd.flags(f, &s)
	c.commandHelp(c.stdout, cmd, f)
	return exitOK
}

// commandHelp writes a command's --help.
func (c *cli) commandHelp(w io.Writer, cmd *command, f *flags) {
	synopsis := strings.TrimSpace("jobguard " + cmd.name + " [flags] " + cmd.args)
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", synopsis, strings.TrimSpace(cmd.long))
	f.usage(w, c.red)
}
