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
	// RescuedReasonDefault is the failure reason the reclaimer's rescue
	// writes on a job it sends back to QUEUED because its worker's lease
	// lapsed. The start guard does not refuse it: the job was not failed.
	RescuedReasonDefault = "rescued: worker lease lost"
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
	// RescuedReason is the failure reason the reclaimer's rescue writes on
	// a job whose worker process's lease lapsed, as it sends the job back
	// to QUEUED with a new generation. It must not start with
	// ReclaimedReason: the start guard would refuse the rescued job. It
	// says why the last attempt ended; the next Start leaves it, and
	// Retry clears it. It is read back whole (a sweep that did not hear
	// its rescue commit counts the rows that carry it), so New refuses
	// one the failure reason column would cut or trim, as it refuses such
	// a ReclaimedReason or CancelledReason. Defaults to
	// RescuedReasonDefault.
	RescuedReason string
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
	if s.RescuedReason == "" {
		s.RescuedReason = RescuedReasonDefault
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
	return s, s.validate()
}

// validate refuses settings, their defaults filled in, that no guard can
// work with.
func (s Shared) validate() error {
	switch {
	case s.Markers != MarkersPostgres && s.Markers != MarkersRedis:
		return fmt.Errorf("Shared.Markers %d is neither MarkersPostgres nor MarkersRedis", int(s.Markers))
	case strings.ContainsAny(s.Prefix, "{}"):
		return fmt.Errorf("Shared.Prefix %q must not contain braces (the job id is the hash tag)", s.Prefix)
	case strings.ContainsAny(s.Prefix, "*?["):
		return fmt.Errorf("Shared.Prefix %q contains a glob character (it names the notice channel)", s.Prefix)
	}
	if err := ident.Check("Shared.NoticeChannel", s.NoticeChannel); err != nil {
		return err
	}
	// The start guard compares the stored reason with it: it must be
	// stored as it is.
	if err := pgvalue.CheckText(s.ReclaimedReason); err != nil {
		return fmt.Errorf("Shared.ReclaimedReason %w: %w", err, ErrUnstorable)
	}
	if err := pgvalue.CheckText(s.RescuedReason); err != nil {
		return fmt.Errorf("Shared.RescuedReason %w: %w", err, ErrUnstorable)
	}
	if s.Reclaimed(s.RescuedReason) || s.Cancelled(s.RescuedReason) {
		return fmt.Errorf("Shared.RescuedReason %q starts with Shared.ReclaimedReason %q or Shared.CancelledReason %q: the start guard would refuse every rescued job",
			s.RescuedReason, s.ReclaimedReason, s.CancelledReason)
	}
	if err := pgvalue.CheckText(s.CancelledReason); err != nil {
		return fmt.Errorf("Shared.CancelledReason %w: %w", err, ErrUnstorable)
	}
	// A reason is a reclaim's or a cancel's by its beginning: one that
	// begins the other would make every job of one look like the other.
	if strings.HasPrefix(s.ReclaimedReason, s.CancelledReason) || strings.HasPrefix(s.CancelledReason, s.ReclaimedReason) {
		return fmt.Errorf("Shared.CancelledReason %q and Shared.ReclaimedReason %q: one begins the other, so a cancel and a reclaim could not be told apart",
			s.CancelledReason, s.ReclaimedReason)
	}
	return nil
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
	// The start guard and the watcher know a reclaim and a cancel by their
	// reasons' beginnings: cut to fit the column, or read back without a
	// trailing space, every such job would look merely failed to them. A
	// rescue is known by its reason read back whole (a sweep that did not
	// hear its rescue commit counts what it reads; an operator looks for
	// it): cut or trimmed, it would be known by none.
	col := g.cat.columns[g.table.FailureReasonColumn]
	for _, r := range []struct{ field, value, what string }{
		{"ReclaimedReason", shared.ReclaimedReason, "a reclaim"},
		{"CancelledReason", shared.CancelledReason, "a cancel"},
		{"RescuedReason", shared.RescuedReason, "a rescue"},
	} {
		if err := g.reasonFits(col, r.field, r.value, r.what); err != nil {
			return nil, err
		}
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

// reasonFits refuses a reason, Shared's field, that the failure reason
// column col cannot store and read back as written: what tells it apart.
func (g *Guard) reasonFits(col typeInfo, field, value, what string) error {
	switch {
	case !col.holds(value):
		return fmt.Errorf("jobguard: new: Shared.%s %q has %d characters, more than column %q (FailureReasonColumn) of %s holds (%s): %w",
			field, value, utf8.RuneCountInString(value), g.table.FailureReasonColumn, g.table.QualifiedName(), col.full, ErrUnstorable)
	case !col.keeps(value):
		return fmt.Errorf("jobguard: new: Shared.%s %q ends in a space, which column %q (FailureReasonColumn) of %s (%s) drops when read: "+
			"the start guard and the watcher could not tell %s; end it in another character: %w",
			field, value, g.table.FailureReasonColumn, g.table.QualifiedName(), col.full, what, ErrUnstorable)
	}
	return nil
}

// Shared returns the guard's shared settings, with their defaults filled
// in.
func (g *Guard) Shared() Shared { return g.shared }
