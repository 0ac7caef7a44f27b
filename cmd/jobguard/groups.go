package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The flag groups. Each command defines the groups it reads, with the
// settings (defaults and config file) as their defaults.

// commonGroups are the groups every command that reaches the servers
// takes, whether it reads them all or not, so that one set of flags (or
// one config file) serves every command.
func (f *flags) commonGroups(s *settings) {
	f.configGroup()
	f.serversGroup(s)
	f.tableGroup(s)
	f.sharedGroup(s)
	f.limitsGroup(s)
}

// configGroup is --config; its value was read before the flags were
// parsed (loadSettings), as it gives the other flags their defaults.
func (f *flags) configGroup() {
	f.section("Config")
	var path string
	f.str(&path, "config", "a JSON config file with the table mapping, the shared settings, the limits "+
		"table, the reclaimer's settings, its source and its parent rules (see 'jobguard help config'); "+
		"flags override it (env "+envConfig+")")
}

// serversGroup is where PostgreSQL and Redis are.
func (f *flags) serversGroup(s *settings) {
	f.section("Servers")
	f.str(&s.DatabaseURL, "database-url", "PostgreSQL URL or key=value string (env "+envDatabaseURL+
		"; without either, libpq's PG* variables and defaults)")
	f.str(&s.RedisURL, "redis-url", "Redis URL, used only for --markers redis, --notices redis or --source bullmq (env "+envRedisURL+")")
}

// tableGroup is the jobs table's mapping (jobguard.Table).
func (f *flags) tableGroup(s *settings) {
	f.section("Jobs table (jobguard.Table: without these flags or the config file's \"table\", the bundled " +
		"migration's; with any, an optional column not named is absent)")
	t := &s.Table
	f.str(&t.Schema, "schema", "schema of the jobs table (empty: the connection's search_path)")
	f.str(&t.Name, "table", "name of the jobs table")
	f.str(&t.IDColumn, "id-column", "primary key: uuid, text or an integer")
	f.str(&t.StatusColumn, "status-column", "status: text or an enum")
	f.str(&t.UpdatedAtColumn, "updated-at-column", "progress signal: timestamptz or timestamp (UTC)")
	f.str(&t.FailureReasonColumn, "failure-reason-column", "failure reason: text")
	f.str(&t.GenerationColumn, "generation-column", "fencing token, optional: an integer")
	f.str(&t.ProgressColumn, "progress-column", "progress, optional: a number")
	f.str(&t.TypeColumn, "type-column", "job type, the key of its limit, optional: text or an enum")
	f.str(&t.ParentIDColumn, "parent-id-column", "parent id, optional")
	f.str(&t.StartedAtColumn, "started-at-column", "start of the current attempt, optional: timestamptz or timestamp (UTC)")
	f.str(&t.OwnerColumn, "owner-column", "the worker process's lease id, which Start writes and the rescue reads, optional: text")
	f.str(&t.Statuses.Queued, "status-queued", "the status value of a queued job")
	f.str(&t.Statuses.Processing, "status-processing", "the status value of a running job")
	f.str(&t.Statuses.Completed, "status-completed", "the status value of a completed job")
	f.str(&t.Statuses.Failed, "status-failed", "the status value of a failed job")
	f.tableFlags = f.sections[len(f.sections)-1].names
}

// sharedGroup is what the workers must agree on (jobguard.Shared).
func (f *flags) sharedGroup(s *settings) {
	f.section("Shared with the workers (jobguard.Shared: set them as the workers' guard does)")
	f.str(&s.Markers, "markers", "where the reclaim markers live: postgres (the job_reclaim_markers table) or redis (env "+envMarkers+")")
	f.str(&s.Shared.Prefix, "prefix", "Redis prefix of the reclaim markers and notices")
	f.str(&s.Shared.ReclaimedReason, "reclaimed-reason", "failure reason a reclaim writes, which the start guard looks for")
	f.str(&s.Shared.CancelledReason, "cancelled-reason", "beginning of the failure reason a cancel writes, which the start guard looks for")
	f.str(&s.Shared.NoticeChannel, "notice-channel", "Postgres LISTEN/NOTIFY channel of the reclaim notices")
	f.int64(&s.Shared.LeaderKey, "leader-key", "advisory lock key that elects the reclaimers' leader; one per jobs table in a database")
}

// limitsGroup is where the per-type limits live (reclaim.TableLimits).
func (f *flags) limitsGroup(s *settings) {
	f.section("Limits table (reclaim.TableLimits: job_type text, max_runtime interval)")
	f.str(&s.LimitsSchema, "limits-schema", "its schema (empty: the jobs table's, --schema)")
	f.str(&s.LimitsTable, "limits-table", "its name")
}

// decisionGroup is what a sweep's decision depends on, beside the limits.
// sweep adds the flags of a sweep's work.
func (f *flags) decisionGroup(s *settings, sweeps bool) {
	f.section("Reclaimer (reclaim.Config)")
	f.duration(&s.NoProgress, "no-progress", "how long updated_at must stand still before a job over its limit is reclaimed")
	if !sweeps {
		return
	}
	f.duration(&s.SweepTimeout, "sweep-timeout", "deadline of each sweep (0: the interval)")
	f.integer(&s.PageSize, "page-size", "listings read from the source at a time")
	f.str(&s.Notices, "notices", "announce each reclaim to the workers' watchers: off, redis or postgres (as the workers' watch.Transport)")
	f.boolean(&s.Rescue, "rescue", "send back to QUEUED the jobs whose worker's lease lapsed (the mapping's --owner-column)")
	f.str(&s.WorkersTable, "workers-table", "the workers' lease table --rescue reads (lease.Migration), in the jobs table's schema")
	f.brakeGroup(s)
}

// brakeGroup is the brake on a sweep that would reclaim far more than
// usual (reclaim.Brake). A negative value turns its cap off.
func (f *flags) brakeGroup(s *settings) {
	b := &s.Brake
	f.section("Brake (reclaim.Brake; negative: off)")
	f.integer(&b.MaxJobs, "brake-max-jobs", "most jobs one sweep reclaims in all")
	f.integer(&b.MaxJobsPerType, "brake-max-jobs-per-type", "most jobs of one type one sweep reclaims")
	f.float(&b.MaxShare, "brake-max-share", "largest share of the running jobs one sweep reclaims in all")
	f.float(&b.MaxSharePerType, "brake-max-share-per-type", "largest share of a type's running jobs one sweep reclaims")
	f.integer(&b.ShareFloor, "brake-share-floor", "reclaims, in all and per type, the share caps never go below")
	f.duration(&b.ClockJump, "brake-clock-jump", "how far the database's clock may move apart from this one's between sweeps")
}

// sourceGroup is where the active jobs are listed (reclaim.Source).
func (f *flags) sourceGroup(s *settings) {
	f.section("Source of the active jobs (reclaim.Source)")
	f.str(&s.Source, "source", "table (the jobs table's started-at column), bullmq (a BullMQ queue's "+
		"processedOn) or river (River's attempted_at)")
	f.str(&s.BullMQ.Queue, "bullmq-queue", "the BullMQ queue's name (--source bullmq)")
	f.str(&s.BullMQ.Prefix, "bullmq-prefix", "the BullMQ queue's key prefix")
	f.str(&s.BullMQ.RowIDField, "bullmq-row-id-field", "field of a BullMQ job's data holding its row id (empty: the BullMQ job id)")
	f.str(&s.BullMQ.GenerationField, "bullmq-generation-field", "field of a BullMQ job's data holding the generation its worker started (empty: unknown)")
	f.str(&s.River.Schema, "river-schema", "schema of River's tables (empty: search_path)")
	f.str(&s.River.RowIDKey, "river-row-id-key", "key of a River job's args holding its row id")
	f.fs.Var(listFlag{&s.River.Queues}, "river-queues", "only these River queues, comma-separated (empty: all)")
	f.add("river-queues")
	f.fs.Var(mapFlag{&s.River.Types}, "river-kinds", "only these River kinds, as kind=type,... mapping each to its job type (empty: all, the kind as the type)")
	f.add("river-kinds")
}

// outputGroup is --json and, for commands whose library calls log, the
// logs' shape.
func (f *flags) outputGroup(s *settings, logs bool) {
	f.section("Output")
	f.boolean(&s.JSON, "json", "print the result as JSON, for scripts, and an error as one JSON object on stderr")
	if logs {
		f.logGroup(s)
	}
}

func (f *flags) logGroup(s *settings) {
	f.str(&s.LogFormat, "log-format", "logs on stderr: text or json")
	f.str(&s.LogLevel, "log-level", "debug, info, warn or error")
}

// listFlag is a comma-separated list.
type listFlag struct{ p *[]string }

func (l listFlag) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l listFlag) Set(v string) error {
	*l.p = nil
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l.p = append(*l.p, item)
		}
	}
	return nil
}

// mapFlag is a comma-separated list of key=value.
type mapFlag struct{ p *map[string]string }

func (m mapFlag) String() string {
	if m.p == nil || len(*m.p) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(*m.p)) {
		parts = append(parts, k+"="+(*m.p)[k])
	}
	return strings.Join(parts, ",")
}

func (m mapFlag) Set(v string) error {
	out := map[string]string{}
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, val, ok := strings.Cut(item, "=")
		if !ok || k == "" || val == "" {
			return fmt.Errorf("%q: want kind=type", item)
		}
		out[k] = val
	}
	*m.p = out
	return nil
}
