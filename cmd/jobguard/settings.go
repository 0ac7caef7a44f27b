package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/bullmq"
	"github.com/jobguard/jobguard/reclaim/riversource"
)

// The environment variables the command reads.
const (
	envDatabaseURL = "JOBGUARD_DATABASE_URL"
	envRedisURL    = "JOBGUARD_REDIS_URL"
	envConfig      = "JOBGUARD_CONFIG"
	envMarkers     = "JOBGUARD_MARKERS"
)

// The marker stores of --markers (jobguard.Shared.Markers).
var markerStores = map[string]jobguard.MarkerBackend{
	jobguard.MarkersPostgres.String(): jobguard.MarkersPostgres,
	jobguard.MarkersRedis.String():    jobguard.MarkersRedis,
}

// redisURLDefault is the Redis of --redis-url when neither the flag nor
// JOBGUARD_REDIS_URL names one.
const redisURLDefault = "redis://127.0.0.1:6379/0"

// The sources of --source.
const (
	sourceTable  = "table"
	sourceBullMQ = "bullmq"
	sourceRiver  = "river"
)

// The transports of --notices.
const (
	noticesOff      = "off"
	noticesRedis    = "redis"
	noticesPostgres = "postgres"
)

// settings are what the commands read. Each comes from its default, then
// the config file, then the environment (the servers' URLs), then a flag:
// the later wins.
type settings struct {
	// DatabaseURL reaches PostgreSQL; empty leaves it to libpq's PG*
	// variables and defaults.
	DatabaseURL string
	// RedisURL reaches Redis, when something lives there: the reclaim
	// markers (--markers redis), the notices (--notices redis) or a
	// BullMQ queue (--source bullmq). Otherwise no Redis is contacted.
	RedisURL string
	// DatabaseURLFrom and RedisURLFrom say where the URLs came from, for
	// the messages about them: a flag, an environment variable, or "" for
	// the default.
	DatabaseURLFrom, RedisURLFrom string
	// ConfigFrom says where the config file's path came from: "--config"
	// or JOBGUARD_CONFIG; "" without a config file. ConfigPath is the path.
	ConfigFrom, ConfigPath string
	// Table maps the jobs table: jobguard.DefaultTable() until the config
	// file's "table" or a table flag describes a table of the user's,
	// which is then mapped as a jobguard.Table literal of what they name
	// (ownTable).
	Table jobguard.Table
	// tableFromConfig says the config file has a "table".
	tableFromConfig bool
	// Shared are the settings the workers must agree on. Its Markers is
	// set by check, from Markers.
	Shared jobguard.Shared
	// Markers names Shared.Markers: postgres or redis.
	Markers string
	// LimitsSchema and LimitsTable say where the per-type limits live. An
	// empty schema is the jobs table's.
	LimitsSchema, LimitsTable string
	// NoProgress, Interval, SweepTimeout and PageSize are the reclaimer's
	// (reclaim.Config).
	NoProgress, Interval, SweepTimeout time.Duration
	PageSize                           int
	// Source is where the active jobs are listed: sourceTable, sourceBullMQ
	// or sourceRiver.
	Source string
	BullMQ bullmq.Config
	River  riversource.Config
	// Notices is how reclaims are announced to the workers' watchers.
	Notices string
	// Rescue turns on the rescue of jobs whose worker's lease lapsed
	// (reclaim.Config.Workers), over the lease table WorkersTable.
	Rescue       bool
	WorkersTable string
	// Brake caps what one sweep reclaims (reclaim.Config.Brake), flags
	// only; ReleaseBrake releases it for one sweep (sweep, run).
	Brake        reclaim.Brake
	ReleaseBrake bool
	// ParentRules are the reclaim's parent rules, by job type, from the
	// config file only.
	ParentRules map[string]reclaim.ParentUpdate

	// The options of one command or another.
	DryRun  bool        // sweep
	Reason  string      // cancel
	Shadow  bool        // limits pause
	Suggest suggestOpts // limits suggest
	Service serviceOpts // run
	Retain  retainOpts  // retain, run

	// JSON prints the result as JSON.
	JSON bool
	// LogFormat and LogLevel shape the logs on stderr.
	LogFormat, LogLevel string
}

// defaultSettings are the settings before the config file and the flags:
// the bundled migrations' table, the library's shared defaults, the
// reclaimer's defaults.
func defaultSettings() settings {
	return settings{
		RedisURL: redisURLDefault,
		Table:    jobguard.DefaultTable(),
		Shared: jobguard.Shared{Prefix: jobguard.PrefixDefault, ReclaimedReason: jobguard.ReclaimedReasonDefault,
			CancelledReason: jobguard.CancelledReasonDefault, NoticeChannel: jobguard.NoticeChannelDefault, LeaderKey: jobguard.LeaderKeyDefault, Markers: jobguard.MarkersDefault},
		Markers:      jobguard.MarkersDefault.String(),
		LimitsTable:  reclaim.LimitsTableDefault,
		NoProgress:   reclaim.NoProgressDefault,
		Interval:     reclaim.IntervalDefault,
		PageSize:     reclaim.PageSizeDefault,
		WorkersTable: lease.WorkersTableDefault,
		Source:       sourceTable,
		BullMQ:       bullmq.Config{Prefix: bullmq.PrefixDefault},
		River:        riversource.Config{RowIDKey: riversource.RowIDKeyDefault},
		Notices:      noticesOff,
		Brake: reclaim.Brake{MaxJobs: reclaim.BrakeMaxJobsDefault, MaxShare: reclaim.BrakeMaxShareDefault,
			MaxJobsPerType: reclaim.BrakeMaxJobsPerTypeDefault, MaxSharePerType: reclaim.BrakeMaxSharePerTypeDefault,
			ShareFloor: reclaim.BrakeShareFloorDefault, ClockJump: reclaim.BrakeClockJumpDefault},
		Suggest:   defaultSuggest(),
		Service:   defaultService(),
		Retain:    defaultRetain(),
		LogFormat: "text",
		LogLevel:  "warn",
	}
}

// needsRedis reports whether anything the settings name lives in Redis.
func (s *settings) needsRedis() bool {
	return s.Shared.Markers == jobguard.MarkersRedis || s.Notices == noticesRedis || s.Source == sourceBullMQ
}

// limitsSchema is the schema of the limits table: its own, else the jobs
// table's.
func (s *settings) limitsSchema() string {
	if s.LimitsSchema != "" {
		return s.LimitsSchema
	}
	return s.Table.Schema
}

// loadSettings returns the defaults with the config file applied: the one
// --config names in args, else the one JOBGUARD_CONFIG names, if any. The
// flags, parsed later, are defined with these as their defaults.
func loadSettings(args []string, getenv func(string) string) (settings, error) {
	s := defaultSettings()
	if p := getenv(envConfig); p != "" {
		s.ConfigPath, s.ConfigFrom = p, envConfig
	}
	if p, ok := configArg(args); ok {
		s.ConfigPath, s.ConfigFrom = p, "--config"
	}
	if s.ConfigPath == "" {
		return s, nil
	}
	data, err := os.ReadFile(s.ConfigPath)
	if err != nil {
		return s, usageErr("%s: %v", s.ConfigFrom, err)
	}
	if err := s.applyConfig(data); err != nil {
		return s, usageErr("%s: %v", s.configName(), err)
	}
	return s, nil
}

// configName names the config file in messages, with where its path came
// from.
func (s *settings) configName() string {
	return fmt.Sprintf("config file %s (%s)", s.ConfigPath, s.ConfigFrom)
}

// databaseURLName names where DatabaseURL came from, in messages.
func (s *settings) databaseURLName() string {
	if s.DatabaseURLFrom == "" {
		return "libpq's PG* environment variables (neither --database-url nor " + envDatabaseURL + " is set)"
	}
	return s.DatabaseURLFrom
}

// redisURLName names where RedisURL came from, in messages.
func (s *settings) redisURLName() string {
	if s.RedisURLFrom == "" {
		return "the default Redis URL " + redisURLDefault + " (neither --redis-url nor " + envRedisURL + " is set)"
	}
	return s.RedisURLFrom
}

// configArg finds the value of --config in args, before the flags are
// parsed: the config file gives the other flags their defaults.
func configArg(args []string) (string, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "config" {
			continue
		}
		if hasValue {
			return value, true
		}
		if i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// configFile is the JSON config file. Every field is optional; a field left
// out keeps its default. Its "table" is a jobguard.Table: a required column
// left out takes its default name, an optional one (generation, progress,
// type, parent, started-at) is absent unless named, as in Go.
type configFile struct {
	Table  *configTable `json:"table"`
	Shared *struct {
		Prefix          *string `json:"prefix"`
		ReclaimedReason *string `json:"reclaimed_reason"`
		CancelledReason *string `json:"cancelled_reason"`
		NoticeChannel   *string `json:"notice_channel"`
		LeaderKey       *int64  `json:"leader_key"`
		Markers         *string `json:"markers"`
	} `json:"shared"`
	Limits *struct {
		Schema *string `json:"schema"`
		Table  *string `json:"table"`
	} `json:"limits"`
	Reclaim *struct {
		NoProgress   *duration `json:"no_progress"`
		Interval     *duration `json:"interval"`
		SweepTimeout *duration `json:"sweep_timeout"`
		PageSize     *int      `json:"page_size"`
		Notices      *string   `json:"notices"`
		Rescue       *bool     `json:"rescue"`
		WorkersTable *string   `json:"workers_table"`
	} `json:"reclaim"`
	Source *configSource `json:"source"`
	Retain *struct {
		Enabled       *bool     `json:"enabled"`
		Interval      *duration `json:"interval"`
		RecordsSchema *string   `json:"records_schema"`
		RecordsTable  *string   `json:"records_table"`
		RecordsAge    *age      `json:"records_age"`
		ArtifactsAge  *age      `json:"artifacts_age"`
		MarkersAge    *age      `json:"markers_age"`
		Batch         *int      `json:"batch"`
	} `json:"retain"`
	ParentRules map[string]struct {
		Schema   string   `json:"schema"`
		Table    string   `json:"table"`
		IDColumn string   `json:"id_column"`
		Column   string   `json:"column"`
		Value    string   `json:"value"`
		From     []string `json:"from"`
	} `json:"parent_rules"`
}

// duration is a time.Duration written as Go writes one: "15m", "1h30m".
// It is parsed by setDuration, which names the field.
type duration string

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"15m\", not %s", b)
	}
	*d = duration(s)
	return nil
}

// durationRange says which durations the command takes.
var durationRange = fmt.Sprintf("a duration such as 15m or 1h30m, at most %v (about 292 years)", time.Duration(math.MaxInt64))

// configTable is the config file's "table": a jobguard.Table literal.
type configTable struct {
	Schema              *string `json:"schema"`
	Name                *string `json:"name"`
	IDColumn            *string `json:"id_column"`
	StatusColumn        *string `json:"status_column"`
	UpdatedAtColumn     *string `json:"updated_at_column"`
	FailureReasonColumn *string `json:"failure_reason_column"`
	GenerationColumn    *string `json:"generation_column"`
	ProgressColumn      *string `json:"progress_column"`
	TypeColumn          *string `json:"type_column"`
	ParentIDColumn      *string `json:"parent_id_column"`
	StartedAtColumn     *string `json:"started_at_column"`
	OwnerColumn         *string `json:"owner_column"`
	Statuses            *struct {
		Queued     *string `json:"queued"`
		Processing *string `json:"processing"`
		Completed  *string `json:"completed"`
		Failed     *string `json:"failed"`
	} `json:"statuses"`
}

// configSource is the config file's "source".
type configSource struct {
	Kind   *string `json:"kind"`
	BullMQ *struct {
		Queue           *string `json:"queue"`
		Prefix          *string `json:"prefix"`
		RowIDField      *string `json:"row_id_field"`
		GenerationField *string `json:"generation_field"`
	} `json:"bullmq"`
	River *struct {
		Schema   *string           `json:"schema"`
		RowIDKey *string           `json:"row_id_key"`
		Queues   []string          `json:"queues"`
		Kinds    map[string]string `json:"kinds"`
	} `json:"river"`
}

// applyTable sets the mapping the config file's "table" says.
func (s *settings) applyTable(t *configTable) {
	s.Table, s.tableFromConfig = jobguard.Table{}.WithDefaults(), true
	set(&s.Table.Schema, t.Schema)
	set(&s.Table.Name, t.Name)
	set(&s.Table.IDColumn, t.IDColumn)
	set(&s.Table.StatusColumn, t.StatusColumn)
	set(&s.Table.UpdatedAtColumn, t.UpdatedAtColumn)
	set(&s.Table.FailureReasonColumn, t.FailureReasonColumn)
	set(&s.Table.GenerationColumn, t.GenerationColumn)
	set(&s.Table.ProgressColumn, t.ProgressColumn)
	set(&s.Table.TypeColumn, t.TypeColumn)
	set(&s.Table.ParentIDColumn, t.ParentIDColumn)
	set(&s.Table.StartedAtColumn, t.StartedAtColumn)
	set(&s.Table.OwnerColumn, t.OwnerColumn)
	if st := t.Statuses; st != nil {
		set(&s.Table.Statuses.Queued, st.Queued)
		set(&s.Table.Statuses.Processing, st.Processing)
		set(&s.Table.Statuses.Completed, st.Completed)
		set(&s.Table.Statuses.Failed, st.Failed)
	}
}

// applySource sets the source the config file's "source" says.
func (s *settings) applySource(src *configSource) {
	set(&s.Source, src.Kind)
	if b := src.BullMQ; b != nil {
		set(&s.BullMQ.Queue, b.Queue)
		set(&s.BullMQ.Prefix, b.Prefix)
		set(&s.BullMQ.RowIDField, b.RowIDField)
		set(&s.BullMQ.GenerationField, b.GenerationField)
	}
	if r := src.River; r != nil {
		set(&s.River.Schema, r.Schema)
		set(&s.River.RowIDKey, r.RowIDKey)
		if r.Queues != nil {
			s.River.Queues = r.Queues
		}
		if r.Kinds != nil {
			s.River.Types = r.Kinds
		}
	}
}

// applyConfig sets what the config file data says. An unknown field is an
// error, so that a misspelt column is not silently left at its default.
func (s *settings) applyConfig(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c configFile
	if err := dec.Decode(&c); err != nil {
		return err
	}
	if c.Table != nil {
		s.applyTable(c.Table)
	}
	if sh := c.Shared; sh != nil {
		set(&s.Shared.Prefix, sh.Prefix)
		set(&s.Shared.ReclaimedReason, sh.ReclaimedReason)
		set(&s.Shared.CancelledReason, sh.CancelledReason)
		set(&s.Shared.NoticeChannel, sh.NoticeChannel)
		set(&s.Shared.LeaderKey, sh.LeaderKey)
		set(&s.Markers, sh.Markers)
	}
	if l := c.Limits; l != nil {
		set(&s.LimitsSchema, l.Schema)
		set(&s.LimitsTable, l.Table)
	}
	if r := c.Reclaim; r != nil {
		if err := errors.Join(setDuration(&s.NoProgress, "reclaim.no_progress", r.NoProgress),
			setDuration(&s.Interval, "reclaim.interval", r.Interval),
			setDuration(&s.SweepTimeout, "reclaim.sweep_timeout", r.SweepTimeout)); err != nil {
			return err
		}
		set(&s.PageSize, r.PageSize)
		set(&s.Notices, r.Notices)
		set(&s.Rescue, r.Rescue)
		set(&s.WorkersTable, r.WorkersTable)
	}
	if c.Source != nil {
		s.applySource(c.Source)
	}
	if r := c.Retain; r != nil {
		if err := setDuration(&s.Retain.Interval, "retain.interval", r.Interval); err != nil {
			return err
		}
		set(&s.Retain.Enabled, r.Enabled)
		set(&s.Retain.RecordsSchema, r.RecordsSchema)
		set(&s.Retain.RecordsTable, r.RecordsTable)
		set(&s.Retain.RecordsAge, r.RecordsAge)
		set(&s.Retain.ArtifactsAge, r.ArtifactsAge)
		set(&s.Retain.MarkersAge, r.MarkersAge)
		set(&s.Retain.Batch, r.Batch)
	}
	if len(c.ParentRules) > 0 {
		s.ParentRules = map[string]reclaim.ParentUpdate{}
		for _, typ := range slices.Sorted(maps.Keys(c.ParentRules)) {
			p := c.ParentRules[typ]
			s.ParentRules[typ] = reclaim.ParentUpdate{Schema: p.Schema, Table: p.Table, IDColumn: p.IDColumn,
				Column: p.Column, Value: p.Value, From: p.From}
		}
	}
	return nil
}

// optionalColumnFlags are the flags of the optional columns, each with the
// field of s.Table it sets.
func (s *settings) optionalColumnFlags() map[string]*string {
	t := &s.Table
	return map[string]*string{"generation-column": &t.GenerationColumn, "progress-column": &t.ProgressColumn,
		"type-column": &t.TypeColumn, "parent-id-column": &t.ParentIDColumn, "started-at-column": &t.StartedAtColumn,
		"owner-column": &t.OwnerColumn}
}

// ownTable maps a table the flags describe, without a "table" in the
// config file, as the config file's would be: once any table flag is
// given, an optional column whose flag is not is absent, as it is in a
// jobguard.Table literal. New warns of a column under a default name that
// is left out.
func (s *settings) ownTable(f *flags) {
	if s.tableFromConfig {
		return
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	described := false
	for _, name := range f.tableFlags {
		described = described || given[name]
	}
	if !described {
		return
	}
	for name, p := range s.optionalColumnFlags() {
		if !given[name] {
			*p = ""
		}
	}
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// setDuration parses v into dst, if set, and names field when it cannot.
func setDuration(dst *time.Duration, field string, v *duration) error {
	if v == nil {
		return nil
	}
	d, err := time.ParseDuration(string(*v))
	if err != nil {
		return fmt.Errorf("%s: %v; want %s", field, err, durationRange)
	}
	*dst = d
	return nil
}

// check validates what the library cannot: the choices among names.
func (s *settings) check() error {
	switch s.Source {
	case sourceTable, sourceBullMQ, sourceRiver:
	default:
		return usageErr("--source %q: want table, bullmq or river", s.Source)
	}
	switch s.Notices {
	case noticesOff, noticesRedis, noticesPostgres:
	default:
		return usageErr("--notices %q: want off, redis or postgres", s.Notices)
	}
	m, ok := markerStores[s.Markers]
	if !ok {
		return usageErr("--markers %q: want postgres or redis (as the workers' jobguard.Shared.Markers)", s.Markers)
	}
	s.Shared.Markers = m
	if s.Source == sourceBullMQ && s.BullMQ.Queue == "" {
		return usageErr("--source bullmq needs --bullmq-queue, the queue's name")
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"--no-progress", s.NoProgress}, {"--interval", s.Interval}, {"--sweep-timeout", s.SweepTimeout}} {
		if err := interval.Check(d.name, d.value); err != nil {
			return usageErr("%v", err)
		}
	}
	if s.PageSize < 0 {
		return usageErr("--page-size %d is negative", s.PageSize)
	}
	for _, sh := range []struct {
		name  string
		value float64
	}{{"--brake-max-share", s.Brake.MaxShare}, {"--brake-max-share-per-type", s.Brake.MaxSharePerType}} {
		if sh.value > 1 || math.IsNaN(sh.value) {
			return usageErr("%s %v: want a share of the running jobs, at most 1 (negative: no cap)", sh.name, sh.value)
		}
	}
	return nil
}
