package jobguard

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/pgvalue"
)

// The defaults of Shared.
const (
	// PrefixDefault namespaces jobguard's Redis keys and channel.
	PrefixDefault = "jobguard"
	// ReclaimedReasonDefault is the failure reason the reclaimer writes and
	// the start guard and the watcher look for.
	ReclaimedReasonDefault = "reclaimed: exceeded runtime limit without progress"
	// CancelledReasonDefault begins the failure reason of an operator's
	// cancel (Guard.Cancel), which the start guard and the watcher look
	// for.
	CancelledReasonDefault = "cancelled by operator"
	// NoticeChannelDefault is the Postgres LISTEN/NOTIFY channel of the
	// reclaim notices.
	NoticeChannelDefault = "jobguard_reclaim_notices"
	// LeaderKeyDefault is the Postgres advisory lock key that elects the
	// reclaimer's leader.
	LeaderKeyDefault int64 = 0x6a6f62_7265636c // "job" "recl"
)

// Shared holds the settings that every process working one jobs table must
// agree on: the workers' start guards and watchers read what the reclaimer
// writes, under these names. They live on the Guard, which every component
// is built from, and nowhere else, so within a process they cannot
// disagree; across processes, build the Guard from one place (one
// GuardConfig in a package every service imports). The zero value is the
// defaults.
type Shared struct {
	// Prefix namespaces jobguard's Redis keys and channel: the reclaim
	// markers "<Prefix>:reclaimed:{<job id>}:<table key>" (with Markers =
	// MarkersRedis; markers in Postgres do not use it) and the notices
	// channel "<Prefix>:reclaim-notices". Markers and notices name the
	// jobs table (Guard.TableKey), so the guards of several jobs tables
	// may share a prefix and a channel. It must not contain braces (the
	// job id is the Redis Cluster hash tag). Defaults to PrefixDefault.
	Prefix string
	// ReclaimedReason is the failure reason the reclaimer writes. The start
	// guard refuses a job whose failure reason starts with it, and the
	// watcher tells a reclaim of its execution's job (cancel) from the
	// execution's own Fail (done) by it. Defaults to ReclaimedReasonDefault.
	ReclaimedReason string
	// CancelledReason begins the failure reason Guard.Cancel writes, as
	// "<CancelledReason>: <the operator's reason>". The start guard refuses
	// a job whose failure reason starts with it (ErrCancelled), and the
	// watcher tells a cancel of its execution's job from the execution's
	// own Fail by it. Neither it nor ReclaimedReason may begin the other.
	// Defaults to CancelledReasonDefault.
	CancelledReason string
	// NoticeChannel is the Postgres LISTEN/NOTIFY channel of the reclaim
	// notices, an identifier of at most 63 bytes; notices over Redis use
	// Prefix instead. Defaults to NoticeChannelDefault.
	NoticeChannel string
	// LeaderKey is the Postgres advisory lock key that elects the leader
	// among the reclaimers of this table. Advisory locks are per database,
	// not per schema or table: guards of different jobs tables in one
	// database need different keys, or only one table is swept. Defaults to
	// LeaderKeyDefault.
	LeaderKey int64
	// Markers says where the reclaimer writes its reclaim markers and the
	// start guards read them: MarkersPostgres, a table in the jobs table's
	// database (marker.Migration), or MarkersRedis, keys under Prefix.
	// Every process working the table must agree on it, or a start guard
	// looks for markers where the reclaimer never wrote them. Defaults to
	// MarkersDefault (MarkersPostgres): a deployment needs no Redis.
	Markers MarkerBackend
}

// MarkerBackend says where reclaim markers live (Shared.Markers).
type MarkerBackend int

const (
	// MarkersPostgres keeps the markers in the table marker.TableName
	// (marker.Migration creates it), found on the search_path when the
	// guard is built. The reclaimer writes them in the reclaim's own
	// transaction, and Start reads them inside its conditional statement.
	MarkersPostgres MarkerBackend = iota + 1
	// MarkersRedis keeps the markers in Redis, one key per job under
	// Shared.Prefix, written after the reclaim commits
	// (marker.RedisStore).
	MarkersRedis
	// MarkersDefault is the marker store of a Shared left at its zero
	// value.
	MarkersDefault = MarkersPostgres
)

func (b MarkerBackend) String() string {
	switch b {
	case MarkersPostgres:
		return "postgres"
	case MarkersRedis:
		return "redis"
	}
	return fmt.Sprintf("MarkerBackend(%d)", int(b))
}

// withDefaults fills in every field left at its zero value and validates
// the names they make: a marker key, the Redis notice channel, the
// Postgres notice channel (an identifier).
// Reclaimed reports whether a job's failure reason says the reclaimer
// failed it: it starts with ReclaimedReason (ReclaimedReasonDefault when
// empty). The start guard refuses such a job, and the watcher tells a
// reclaim of its execution's job from the execution's own Fail by it:
// both ask here.
func (s Shared) Reclaimed(reason string) bool {
	prefix := s.ReclaimedReason
	if prefix == "" {
		prefix = ReclaimedReasonDefault
	}
	return strings.HasPrefix(reason, prefix)
}

// Cancelled reports whether a job's failure reason says an operator
// cancelled it (Guard.Cancel): it starts with CancelledReason
// (CancelledReasonDefault when empty). The start guard refuses such a
// job, and the watcher tells a cancel of its execution's job from the
// execution's own Fail by it: both ask here.
func (s Shared) Cancelled(reason string) bool {
	prefix := s.CancelledReason
	if prefix == "" {
		prefix = CancelledReasonDefault
	}
	return strings.HasPrefix(reason, prefix)
}

func (s Shared) withDefaults() (Shared, error) {
	if s.Prefix == "" {
		s.Prefix = PrefixDefault
	}
	if s.ReclaimedReason == "" {
		s.ReclaimedReason = ReclaimedReasonDefault
	}
	if s.CancelledReason == "" {
		s.CancelledReason = CancelledReasonDefault
	}
	if s.NoticeChannel == "" {
		s.NoticeChannel = NoticeChannelDefault
	}
	if s.LeaderKey == 0 {
		s.LeaderKey = LeaderKeyDefault
	}
	if s.Markers == 0 {
		s.Markers = MarkersDefault
	}
	switch {
	case s.Markers != MarkersPostgres && s.Markers != MarkersRedis:
		return s, fmt.Errorf("Shared.Markers %d is neither MarkersPostgres nor MarkersRedis", int(s.Markers))
	case strings.ContainsAny(s.Prefix, "{}"):
		return s, fmt.Errorf("Shared.Prefix %q must not contain braces (the job id is the hash tag)", s.Prefix)
	case strings.ContainsAny(s.Prefix, "*?["):
		return s, fmt.Errorf("Shared.Prefix %q contains a glob character (it names the notice channel)", s.Prefix)
	}
	if err := ident.Check("Shared.NoticeChannel", s.NoticeChannel); err != nil {
		return s, err
	}
	// The start guard compares the stored reason with it: it must be
	// stored as it is.
	if err := pgvalue.CheckText(s.ReclaimedReason); err != nil {
		return s, fmt.Errorf("Shared.ReclaimedReason %w: %w", err, ErrUnstorable)
	}
	if err := pgvalue.CheckText(s.CancelledReason); err != nil {
		return s, fmt.Errorf("Shared.CancelledReason %w: %w", err, ErrUnstorable)
	}
	// A reason is a reclaim's or a cancel's by its beginning: one that
	// begins the other would make every job of one look like the other.
	if strings.HasPrefix(s.ReclaimedReason, s.CancelledReason) || strings.HasPrefix(s.CancelledReason, s.ReclaimedReason) {
		return s, fmt.Errorf("Shared.CancelledReason %q and Shared.ReclaimedReason %q: one begins the other, so a cancel and a reclaim could not be told apart",
			s.CancelledReason, s.ReclaimedReason)
	}
	return s, nil
}

// sharedDefaults is what New gives every guard.
var sharedDefaults, _ = Shared{}.withDefaults()

// GuardConfig configures what NewWithConfig adds to a Guard.
type GuardConfig struct {
	// Shared holds the settings every process working the table must agree
	// on. Defaults to the defaults of each field.
	Shared Shared
	// MeterProvider receives the guard's metrics: jobguard.completions,
	// counted by outcome (accepted, refused, error) and, for refusals, reason
	// (terminal, superseded, not_found, unknown). Defaults to nil: no
	// metrics, at no cost.
	MeterProvider metric.MeterProvider
	// Logger receives what New has to say of the mapping: a warning for
	// each column under an optional column's default name that the mapping
	// leaves out (Guard.Unmapped). Defaults to slog.Default().
	Logger *slog.Logger
}

// NewWithConfig is New with a configuration: it validates and builds the
// guard exactly like New, with its shared settings, its metrics and its
// logger. New is NewWithConfig with the zero GuardConfig.
func NewWithConfig(ctx context.Context, db DB, table Table, cfg GuardConfig) (*Guard, error) {
	shared, err := cfg.Shared.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("jobguard: new: %w", err)
	}
	g, err := newGuard(ctx, db, table)
	if err != nil {
		return nil, err
	}
	// The start guard knows a reclaim by its whole reason: cut to fit the
	// column, every reclaimed job would look merely failed to it.
	if col := g.cat.columns[g.table.FailureReasonColumn]; !col.holds(shared.ReclaimedReason) {
		return nil, fmt.Errorf("jobguard: new: Shared.ReclaimedReason %q has %d characters, more than column %q (FailureReasonColumn) of %s holds (%s): %w",
			shared.ReclaimedReason, utf8.RuneCountInString(shared.ReclaimedReason), g.table.FailureReasonColumn, g.table.QualifiedName(), col.full, ErrUnstorable)
	}
	if col := g.cat.columns[g.table.FailureReasonColumn]; !col.holds(shared.CancelledReason) {
		return nil, fmt.Errorf("jobguard: new: Shared.CancelledReason %q has %d characters, more than column %q (FailureReasonColumn) of %s holds (%s): %w",
			shared.CancelledReason, utf8.RuneCountInString(shared.CancelledReason), g.table.FailureReasonColumn, g.table.QualifiedName(), col.full, ErrUnstorable)
	}
	g.shared = shared
	g.met = newGuardMetrics(cfg.MeterProvider)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	for _, u := range g.unmapped {
		log.WarnContext(ctx, fmt.Sprintf("jobguard: new: table %s has a column %q that the mapping leaves out; "+
			"set Table.%s to %q to map it (%s)", g.table.QualifiedName(), u.Column, u.Field, u.Column, unmappedCost[u.Field]),
			slog.String("table", g.cat.key), slog.String("column", u.Column), slog.String("field", u.Field))
	}
	return g, nil
}

// Shared returns the guard's shared settings, with their defaults filled
// in.
func (g *Guard) Shared() Shared { return g.shared }
