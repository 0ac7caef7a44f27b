package marker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is what a RedisStore needs of a Redis client. redis.UniversalClient
// satisfies it, so a single node, Sentinel and Cluster all work.
type Redis interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

var _ Redis = (redis.UniversalClient)(nil)

// RedisStore reads and writes reclaim markers in Redis, for jobguard's
// Shared.Markers = MarkersRedis. Each job has one key,
// "<Shared.Prefix>:reclaimed:{<job id>}:<table key>": the job's canonical
// id (Jobs.CanonicalID), whatever spelling a call is given, and its jobs
// table's Jobs.TableKey, so that the jobs of several tables under one
// prefix (job 42 of two integer-id tables) have markers of their own. The
// braces make the job id the Redis Cluster hash tag, so every key of a job
// lives in one slot.
type RedisStore struct {
	jobs   Jobs
	rdb    Redis
	prefix string
	ttl    time.Duration
}

// NewRedisStore returns a store of the markers of jobs (a
// *jobguard.Guard) in rdb, under the prefix jobs.MarkerPlace names
// (jobguard's Shared.Prefix).
func NewRedisStore(jobs Jobs, rdb Redis, cfg Config) (*RedisStore, error) {
	if isNil(jobs) {
		return nil, errors.New("jobguard: marker store: jobs is nil")
	}
	if rdb == nil {
		return nil, errors.New("jobguard: marker store: redis client is nil")
	}
	ttl, err := ttlOf(cfg)
	if err != nil {
		return nil, fmt.Errorf("jobguard: marker store: %w", err)
	}
	return &RedisStore{jobs: jobs, rdb: rdb, prefix: jobs.MarkerPlace().Prefix, ttl: ttl}, nil
}

// Key returns the Redis key of jobID's marker. An id the column cannot
// hold has no marker; its key is spelled as given.
func (s *RedisStore) Key(jobID string) string {
	if id, err := s.jobs.CanonicalID(jobID); err == nil {
		jobID = id
	}
	return s.key(jobID)
}

// key is the key of the job of canonical id id.
func (s *RedisStore) key(id string) string {
	return s.prefix + ":reclaimed:{" + id + "}:" + s.jobs.TableKey()
}

// keys returns the key of each marker, as key does, cut from one string:
// one allocation for a write's keys, not one each.
func (s *RedisStore) keys(markers []Marker) []string {
	table := s.jobs.TableKey()
	buf := make([]byte, 0, len(markers)*(len(s.prefix)+len(":reclaimed:{}:")+len(table)+36))
	ends := make([]int, len(markers))
	for i, m := range markers {
		buf = append(append(append(append(append(buf, s.prefix...), ":reclaimed:{"...), m.JobID...), "}:"...), table...)
		ends[i] = len(buf)
	}
	return cut(string(buf), ends)
}

// cut returns the pieces of all that end at ends, in order. A piece of a
// string shares its bytes: cutting allocates only the slice.
func cut(all string, ends []int) []string {
	out := make([]string, len(ends))
	from := 0
	for i, end := range ends {
		out[i] = all[from:end]
		from = end
	}
	return out
}

// canonical returns m with its job's canonical id.
func (s *RedisStore) canonical(m Marker) (Marker, error) {
	id, err := s.jobs.CanonicalID(m.JobID)
	m.JobID = id
	return m, err
}

// writeMarkers stores each marker of KEYS (ARGV: value and generation per
// key, then the TTL in milliseconds) unless its key holds one of a higher
// generation: two reclaimers writing out of order must not move a marker
// backwards, or a start guard would let the newer reclaimed execution's job
// through. A value Read would refuse (not a marker, a generation that is not
// a whole number from 0 to 2^53) is overwritten.
const writeMarkersLua = `
local ttl = ARGV[#ARGV]
for i, key in ipairs(KEYS) do
  local keep = false
  local cur = redis.call('GET', key)
  if cur then
    local ok, m = pcall(cjson.decode, cur)
    local g = ok and type(m) == 'table' and m.generation
    keep = type(g) == 'number' and g >= 0 and g <= 9007199254740992 and g == math.floor(g) and g > tonumber(ARGV[2*i])
  end
  if not keep then
    redis.call('SET', key, ARGV[2*i-1], 'PX', ttl)
  end
end
return #KEYS
`

var writeMarkers = redis.NewScript(writeMarkersLua)

// markersPerCall is how many markers one script call writes when every key
// may go to one call: a single server. A call costs far more than a key.
const markersPerCall = 500

// Write stores the markers in one pipelined round trip, each with the
// store's TTL. A key that already holds a marker of a higher generation
// keeps it. The error joins every marker that could not be written; one
// whose id the column cannot hold is not sent, and its error wraps
// ErrInvalidJobID.
//
// Against a single server (a *redis.Client, Sentinel's included) one script
// call writes many markers; any other client (Cluster, whose keys live in
// different slots, or a client of unknown kind) gets one call per marker.
func (s *RedisStore) Write(ctx context.Context, markers ...Marker) error {
	var refused []error // markers of ids the column cannot hold
	valid := make([]Marker, 0, len(markers))
	for _, m := range markers {
		c, err := s.canonical(m)
		if err != nil {
			refused = append(refused, fmt.Errorf("job %s: %w", m.JobID, err))
			continue
		}
		valid = append(valid, c)
	}
	markers = valid
	if len(markers) == 0 {
		if len(refused) > 0 {
			return fmt.Errorf("jobguard: write markers: %w", errors.Join(refused...))
		}
		return nil
	}
	values, err := encodeMarkers(markers)
	if err != nil {
		return fmt.Errorf("jobguard: write markers: %w", errors.Join(append(refused, err)...))
	}
	per := 1
	if _, single := s.rdb.(*redis.Client); single {
		per = markersPerCall
	}
	keys := s.keys(markers)
	var calls []markerCall
	for from := 0; from < len(markers); from += per {
		c := markerCall{from: from, to: min(from+per, len(markers))}
		c.keys = keys[c.from:c.to]
		c.args = make([]any, 0, 2*(c.to-c.from)+1)
		for i := c.from; i < c.to; i++ {
			c.args = append(c.args, values[i], markers[i].Generation)
		}
		c.args = append(c.args, s.ttl.Milliseconds())
		calls = append(calls, c)
	}
	failed := s.runCalls(ctx, calls)
	if len(failed) == 0 && len(refused) == 0 {
		return nil
	}
	errs := refused
	for _, c := range calls {
		if e, ok := failed[c.from]; ok {
			for i := c.from; i < c.to; i++ {
				errs = append(errs, fmt.Errorf("job %s: %w", markers[i].JobID, e))
			}
		}
	}
	return fmt.Errorf("jobguard: write markers: %w", errors.Join(errs...))
}

// markerCall is one script call: the markers from..to and their keys and
// arguments.
type markerCall struct {
	from, to int
	keys     []string
	args     []any
}

// runCalls makes the calls in one pipeline, by the script's hash first; a
// server that has not seen the script yet (or lost it in a restart) gets it
// whole, for the calls it refused. It returns the error of each failed
// call, keyed by its first marker.
func (s *RedisStore) runCalls(ctx context.Context, calls []markerCall) map[int]error {
	run := func(calls []markerCall, whole bool) ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(calls))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range calls {
				if whole {
					cmds[i] = p.Eval(ctx, writeMarkersLua, c.keys, c.args...)
				} else {
					cmds[i] = p.EvalSha(ctx, writeMarkers.Hash(), c.keys, c.args...)
				}
			}
			return nil
		})
		return cmds, err
	}
	failed := map[int]error{}
	collect := func(calls []markerCall, cmds []*redis.Cmd, err error) (noScript []markerCall) {
		for i, c := range cmds {
			switch {
			case c == nil:
				failed[calls[i].from] = err
			case redis.HasErrorPrefix(c.Err(), "NOSCRIPT"):
				noScript = append(noScript, calls[i])
			case c.Err() != nil:
				failed[calls[i].from] = c.Err()
			}
		}
		return noScript
	}
	cmds, err := run(calls, false)
	if err == nil {
		return nil
	}
	if retry := collect(calls, cmds, err); len(retry) > 0 {
		cmds, err := run(retry, true)
		for _, c := range collect(retry, cmds, err) {
			failed[c.from] = errors.New("NOSCRIPT after the script was sent whole")
		}
	}
	return failed
}

// encodeMarkers returns what json.Marshal gives for each marker. The markers
// of one sweep share their reason and time: those are encoded once, and
// each marker adds its generation. The values are cut from one string.
func encodeMarkers(markers []Marker) ([]string, error) {
	ends := make([]int, len(markers))
	var buf, tail []byte
	for i, m := range markers {
		if i == 0 || m.Reason != markers[i-1].Reason || !m.At.Equal(markers[i-1].At) {
			reason, err := json.Marshal(m.Reason)
			if err != nil {
				return nil, fmt.Errorf("job %s: %w", m.JobID, err)
			}
			at, err := json.Marshal(m.At)
			if err != nil {
				return nil, fmt.Errorf("job %s: %w", m.JobID, err)
			}
			tail = append(append(append(append([]byte(`,"reason":`), reason...), `,"at":`...), at...), '}')
		}
		if buf == nil {
			buf = make([]byte, 0, len(markers)*(len(`{"generation":`)+20+len(tail)))
		}
		buf = strconv.AppendInt(append(buf, `{"generation":`...), m.Generation, 10)
		buf = append(buf, tail...)
		ends[i] = len(buf)
	}
	return cut(string(buf), ends), nil
}

// Read returns jobID's marker, under its canonical id; found is false when
// there is none. A key that holds something else returns an error
// wrapping ErrUnreadable; an id the column cannot hold, one wrapping
// ErrInvalidJobID.
func (s *RedisStore) Read(ctx context.Context, jobID string) (m Marker, found bool, err error) {
	id, err := s.jobs.CanonicalID(jobID)
	if err != nil {
		return Marker{}, false, fmt.Errorf("jobguard: read marker: %w", err)
	}
	jobID = id
	v, err := s.rdb.Get(ctx, s.key(jobID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Marker{}, false, nil
	}
	if err != nil {
		return Marker{}, false, fmt.Errorf("jobguard: read marker of job %s: %w", jobID, err)
	}
	if err := json.Unmarshal(v, &m); err != nil || m.Generation < 0 {
		return Marker{}, false, fmt.Errorf("%w: key %s holds %.64q", ErrUnreadable, s.key(jobID), v)
	}
	m.JobID = jobID
	return m, true, nil
}

// Delete removes jobID's marker. An id the column cannot hold returns an
// error wrapping ErrInvalidJobID.
func (s *RedisStore) Delete(ctx context.Context, jobID string) error {
	id, err := s.jobs.CanonicalID(jobID)
	if err != nil {
		return fmt.Errorf("jobguard: delete marker: %w", err)
	}
	if err := s.rdb.Del(ctx, s.key(id)).Err(); err != nil {
		return fmt.Errorf("jobguard: delete marker of job %s: %w", jobID, err)
	}
	return nil
}
