package marker

import (
	"errors"
	"fmt"
	"reflect"
	"time"
)

// TTLDefault is how long a reclaim marker lives by default.
const TTLDefault = 7 * 24 * time.Hour

// Marker records that a job's execution was reclaimed. It outlives a late
// worker that overwrites the database's failure reason, and it names the
// generation it was written for, so that a Retry (which bumps the
// generation) is not blocked by it.
type Marker struct {
	JobID      string    `json:"-"`
	Generation int64     `json:"generation"`
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

// Jobs is the jobs table whose markers a store keeps. *jobguard.Guard
// satisfies it; this package does not import jobguard, which imports it
// (the start guard reads markers).
type Jobs interface {
	// TableKey names the jobs table in every key (jobguard's
	// Guard.TableKey), so that several tables share a prefix or a table.
	TableKey() string
	// CanonicalID returns a job id in the one spelling every key uses, or
	// an error wrapping jobguard.ErrInvalidJobID.
	CanonicalID(jobID string) (string, error)
	// MarkerPlace says where the markers live, as the guard's Shared
	// settings and its catalog say: a store asks it, and has no setting of
	// its own that could disagree with the reclaimer's.
	MarkerPlace() Place
}

// Place is where the markers of one jobs table live.
type Place struct {
	// Prefix namespaces the Redis keys (jobguard's Shared.Prefix).
	Prefix string
	// Table is the marker table (TableName) as the catalog names it, found
	// on the search_path when the guard was built; "" when there was none.
	Table string
}

// Config configures a store.
type Config struct {
	// TTL is how long a marker lives. Defaults to TTLDefault (7 days).
	TTL time.Duration
}

// ErrUnreadable is returned by RedisStore.Read when the key holds
// something that is not a marker. The start guard treats it as a failed
// lookup.
var ErrUnreadable = errors.New("jobguard: unreadable reclaim marker")

// ttlOf is cfg's TTL with its default, checked.
func ttlOf(cfg Config) (time.Duration, error) {
	if cfg.TTL == 0 {
		cfg.TTL = TTLDefault
	}
	if cfg.TTL < time.Second {
		return 0, fmt.Errorf("TTL %v is shorter than a second", cfg.TTL)
	}
	return cfg.TTL, nil
}

// isNil reports whether jobs is nil, or a nil pointer in an interface (a
// nil *jobguard.Guard), which would otherwise panic at its first call.
func isNil(jobs Jobs) bool {
	if jobs == nil {
		return true
	}
	v := reflect.ValueOf(jobs)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
