package jobguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Marker defaults.
const (
	MarkerPrefixDefault = "jobguard"
	MarkerTTLDefault    = 7 * 24 * time.Hour
)

// Redis is what jobguard needs of a Redis client. redis.UniversalClient
// satisfies it, so a single node, Sentinel and Cluster all work.
type Redis interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

var _ Redis = (redis.UniversalClient)(nil)

// Marker records in Redis that a job's execution was reclaimed. It outlives
// a late worker that overwrites the database's failure reason, and it names
// the generation it was written for, so that a Retry (which bumps the
// generation) is not blocked by it.
type Marker struct {
	JobID      string    `json:"-"`
	Generation int64     `json:"generation"`
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

// MarkerConfig configures a MarkerStore.
type MarkerConfig struct {
	// Prefix namespaces the keys. Defaults to MarkerPrefixDefault.
	Prefix string
	// TTL is how long a marker lives. Defaults to MarkerTTLDefault (7 days).
	TTL time.Duration
}

// MarkerStore reads and writes reclaim markers. Each job has one key,
// "<prefix>:reclaimed:{<job id>}"; the braces make the job id the Redis
// Cluster hash tag, so every key of a job lives in one slot.
type MarkerStore struct {
	rdb    Redis
	prefix string
	ttl    time.Duration
}

// ErrBadMarker is returned by MarkerStore.Read when the key holds something
// that is not a marker. The start guard treats it as a failed lookup.
var ErrBadMarker = errors.New("jobguard: unreadable reclaim marker")

// NewMarkerStore returns a store over rdb.
func NewMarkerStore(rdb Redis, cfg MarkerConfig) (*MarkerStore, error) {
	if rdb == nil {
		return nil, errors.New("jobguard: marker store: redis client is nil")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = MarkerPrefixDefault
	}
	if cfg.TTL == 0 {
		cfg.TTL = MarkerTTLDefault
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("jobguard: marker store: TTL %v is shorter than a second", cfg.TTL)
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("jobguard: marker store: Prefix %q must not contain braces (the job id is the hash tag)", cfg.Prefix)
	}
	return &MarkerStore{rdb: rdb, prefix: cfg.Prefix, ttl: cfg.TTL}, nil
}

// Key returns the Redis key of jobID's marker.
func (s *MarkerStore) Key(jobID string) string {
	return s.prefix + ":reclaimed:{" + jobID + "}"
}

// writeMarker stores a marker unless the key holds one of a higher
// generation: two reclaimers writing out of order must not move a marker
// backwards, or a start guard would let the newer reclaimed execution's job
// through. A value Read would refuse (not a marker, a generation that is not
// a whole number from 0 to 2^53) is overwritten.
const writeMarkerLua = `
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, m = pcall(cjson.decode, cur)
  local g = ok and type(m) == 'table' and m.generation
  if type(g) == 'number' and g >= 0 and g <= 9007199254740992 and g == math.floor(g) and g > tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
`

var writeMarker = redis.NewScript(writeMarkerLua)

// Write stores the markers in one pipelined round trip, each with the
// store's TTL. A key that already holds a marker of a higher generation
// keeps it. The error joins every marker that could not be written.
func (s *MarkerStore) Write(ctx context.Context, markers ...Marker) error {
	if len(markers) == 0 {
		return nil
	}
	values := make([]string, len(markers))
	for i, m := range markers {
		v, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("jobguard: write markers: job %s: %w", m.JobID, err)
		}
		values[i] = string(v)
	}
	ttl := s.ttl.Milliseconds()
	run := func(idx []int, eval func(p redis.Pipeliner, key string, args ...any) *redis.Cmd) ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(idx))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, m := range idx {
				cmds[i] = eval(p, s.Key(markers[m].JobID), values[m], markers[m].Generation, ttl)
			}
			return nil
		})
		return cmds, err
	}
	all := make([]int, len(markers))
	for i := range all {
		all[i] = i
	}
	// By hash first; a server that has not seen the script yet (or lost it
	// in a restart) gets it whole, for the markers it refused.
	cmds, err := run(all, func(p redis.Pipeliner, key string, args ...any) *redis.Cmd {
		return p.EvalSha(ctx, writeMarker.Hash(), []string{key}, args...)
	})
	if err == nil {
		return nil
	}
	var retry []int
	for i, c := range cmds {
		if c != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			retry = append(retry, all[i])
		}
	}
	failed := map[int]error{}
	for i, c := range cmds {
		if c == nil {
			failed[all[i]] = err
		} else if c.Err() != nil && !redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			failed[all[i]] = c.Err()
		}
	}
	if len(retry) > 0 {
		again, rerr := run(retry, func(p redis.Pipeliner, key string, args ...any) *redis.Cmd {
			return p.Eval(ctx, writeMarkerLua, []string{key}, args...)
		})
		for i, c := range again {
			switch {
			case c == nil:
				failed[retry[i]] = rerr
			case c.Err() != nil:
				failed[retry[i]] = c.Err()
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	var errs []error
	for i, m := range markers {
		if e, ok := failed[i]; ok {
			errs = append(errs, fmt.Errorf("job %s: %w", m.JobID, e))
		}
	}
	return fmt.Errorf("jobguard: write markers: %w", errors.Join(errs...))
}

// Read returns jobID's marker; found is false when there is none. A key that
// holds something else returns an error wrapping ErrBadMarker.
func (s *MarkerStore) Read(ctx context.Context, jobID string) (m Marker, found bool, err error) {
	v, err := s.rdb.Get(ctx, s.Key(jobID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Marker{}, false, nil
	}
	if err != nil {
		return Marker{}, false, fmt.Errorf("jobguard: read marker of job %s: %w", jobID, err)
	}
	if err := json.Unmarshal(v, &m); err != nil || m.Generation < 0 {
		return Marker{}, false, fmt.Errorf("%w: key %s holds %.64q", ErrBadMarker, s.Key(jobID), v)
	}
	m.JobID = jobID
	return m, true, nil
}

// Delete removes jobID's marker.
func (s *MarkerStore) Delete(ctx context.Context, jobID string) error {
	if err := s.rdb.Del(ctx, s.Key(jobID)).Err(); err != nil {
		return fmt.Errorf("jobguard: delete marker of job %s: %w", jobID, err)
	}
	return nil
}
