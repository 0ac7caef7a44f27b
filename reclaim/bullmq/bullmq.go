package bullmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/reclaim"
)

// PrefixDefault is BullMQ's default key prefix.
const PrefixDefault = "bull"

// ErrNoJobHash is the per-job error of a job id that is on the active list
// but has no job hash (the job was removed). The job is skipped.
var ErrNoJobHash = errors.New("bullmq: active job has no hash")

// Redis is what the source needs of a Redis client: running a Lua script.
// redis.UniversalClient satisfies it, so a single node, Sentinel and Cluster
// all work.
type Redis = redis.Scripter

var _ Redis = (redis.UniversalClient)(nil)

// Config configures a Source.
type Config struct {
	// Redis holds the queue. Required.
	Redis Redis
	// Prefix is the queue's key prefix, as given to BullMQ's Queue and
	// Worker. On Redis Cluster it must contain a hash tag ("{bull}"), as
	// BullMQ itself requires. Defaults to PrefixDefault.
	Prefix string
	// Queue is the queue's name. Required.
	Queue string
	// RowIDField, when set, names a top-level field of the job's data that
	// holds the id of the job's row in the jobs table (a string or an
	// integer). Defaults to "", which uses the BullMQ job id itself.
	RowIDField string
	// GenerationField, when set, names a top-level field of the job's data
	// that holds the generation of the execution running it: a worker that
	// stores what StartGuard.Start returned there (job.updateData) lets a
	// sweep tell a listing of an attempt the row has moved past (after a
	// Retry, or a restart by another path) from the current one. A job
	// without the field has an unknown generation. Defaults to "": unknown.
	GenerationField string
}

// Source lists a BullMQ queue's active jobs. It is safe for concurrent use.
type Source struct {
	rdb    Redis
	active string
	jobKey string
	field  string
	gen    string
}

var _ reclaim.Source = (*Source)(nil)

// New validates cfg and returns the source.
func New(cfg Config) (*Source, error) {
	switch {
	case cfg.Redis == nil:
		return nil, errors.New("bullmq: new: Redis is nil")
	case cfg.Queue == "":
		return nil, errors.New("bullmq: new: Queue is empty")
	case strings.Contains(cfg.Queue, ":"):
		return nil, fmt.Errorf("bullmq: new: Queue %q contains ':', which BullMQ does not allow", cfg.Queue)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = PrefixDefault
	}
	base := cfg.Prefix + ":" + cfg.Queue + ":"
	return &Source{rdb: cfg.Redis, active: base + "active", jobKey: base, field: cfg.RowIDField, gen: cfg.GenerationField}, nil
}

// snapshot reads one page of the active list and every listed job's start
// time, name and (when asked) data in one script, so the page and its hashes
// are one consistent state: a job cannot leave the list between the two
// reads. It returns the list's length first. The page is counted from the
// tail, where BullMQ's oldest active jobs are (it pushes a job at the head
// when it starts it), so jobs that start meanwhile do not shift it. The job
// keys share the list's slot because BullMQ's prefix carries the queue's
// hash tag on Cluster.
var snapshot = redis.NewScript(`
local n = redis.call('LLEN', KEYS[1])
local ids = redis.call('LRANGE', KEYS[1], -tonumber(ARGV[3]) - tonumber(ARGV[4]), -tonumber(ARGV[3]) - 1)
local out = {n}
for i = 1, #ids do
  local key = ARGV[1] .. ids[i]
  local kind = redis.call('TYPE', key).ok
  local f = {}
  if kind == 'hash' then
    if ARGV[2] == '1' then
      f = redis.call('HMGET', key, 'processedOn', 'name', 'data')
    else
      f = redis.call('HMGET', key, 'processedOn', 'name')
    end
  end
  out[i + 1] = {ids[i], kind, f[1] or false, f[2] or false, f[3] or false}
end
return out
`)

// Active lists the queue's active jobs, q.PageSize at a time, oldest first.
// StartedAt is the job's processedOn: BullMQ sets it, in the worker's clock,
// every time the job moves to active, so it measures the current attempt (a
// retried job starts over). The type is the job's name. A listed id without
// a hash is returned with ErrNoJobHash; one without processedOn with a zero
// StartedAt; the sweep skips and counts both (the second unless its row has
// a start of its own).
func (s *Source) Active(ctx context.Context, q reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	if q.PageSize <= 0 {
		return fmt.Errorf("bullmq: read %s: PageSize %d is not positive", s.active, q.PageSize)
	}
	withData := "0"
	if s.field != "" || s.gen != "" {
		withData = "1"
	}
	for offset := 0; ; offset += q.PageSize {
		v, err := snapshot.Run(ctx, s.rdb, []string{s.active}, s.jobKey, withData, offset, q.PageSize).Slice()
		if err != nil {
			return fmt.Errorf("bullmq: read %s: %w", s.active, err)
		}
		if len(v) == 0 {
			return fmt.Errorf("bullmq: read %s: empty reply", s.active)
		}
		listed, _ := v[0].(int64)
		jobs := make([]reclaim.ActiveJob, 0, len(v)-1)
		for _, e := range v[1:] {
			f, ok := e.([]any)
			if !ok || len(f) != 5 {
				return fmt.Errorf("bullmq: read %s: unexpected reply %v", s.active, e)
			}
			jobs = append(jobs, s.job(str(f[0]), str(f[1]), str(f[2]), str(f[3]), str(f[4])))
		}
		if len(jobs) > 0 {
			if err := page(jobs); err != nil {
				return err
			}
		}
		if int64(offset+q.PageSize) >= listed {
			return nil
		}
	}
}

// job reads one listed job from the script's reply.
func (s *Source) job(id, kind, processedOn, name, data string) reclaim.ActiveJob {
	job := reclaim.ActiveJob{ID: id, Type: name}
	switch kind {
	case "none":
		job.Err = fmt.Errorf("%w: %s%s", ErrNoJobHash, s.jobKey, id)
		return job
	case "hash":
	default:
		job.Err = fmt.Errorf("%w: %s%s holds a %s", ErrNoJobHash, s.jobKey, id, kind)
		return job
	}
	var err error
	if processedOn != "" {
		job.StartedAt, err = parseMillis(processedOn)
	}
	if err == nil && s.field != "" {
		var row string
		if row, err = rowID(data, s.field); err == nil {
			job.ID = row
		}
	}
	if err == nil && s.gen != "" {
		job.Generation, err = generation(data, s.gen)
	}
	if err != nil {
		job.Err = fmt.Errorf("bullmq: job %s: %w", id, err)
	}
	return job
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// maxMillis is the last millisecond of year 9999: a larger processedOn is
// garbage, not a start time.
const maxMillis = 253402300799999

// parseMillis reads processedOn: whole milliseconds since the epoch, as
// BullMQ writes them. Anything else (a fraction, an exponent, a value out of
// range) is an error, so that a garbled hash is skipped instead of being
// read as a start decades ago (reclaimed at once) or far ahead (never).
func parseMillis(s string) (time.Time, error) {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 || ms > maxMillis {
		return time.Time{}, fmt.Errorf("processedOn %q is not a time in whole milliseconds", s)
	}
	return time.UnixMilli(ms), nil
}

// rowID reads field of the job's JSON data as a row id.
func rowID(data, field string) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		return "", fmt.Errorf("data is not a JSON object: %w", err)
	}
	raw, ok := m[field]
	if !ok {
		return "", fmt.Errorf("data has no field %q", field)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && s != "" {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		if _, err := n.Int64(); err == nil {
			return n.String(), nil
		}
	}
	return "", fmt.Errorf("data field %q is %s; want a string or an integer", field, raw)
}

// generation reads field of the job's JSON data as a generation; a job
// without the field has none (0).
func generation(data, field string) (int64, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		return 0, fmt.Errorf("data is not a JSON object: %w", err)
	}
	raw, ok := m[field]
	if !ok || string(raw) == "null" {
		return 0, nil
	}
	var n json.Number
	if raw[0] != '"' && json.Unmarshal(raw, &n) == nil {
		if g, err := n.Int64(); err == nil && g > 0 {
			return g, nil
		}
	}
	return 0, fmt.Errorf("data field %q is %s; want a positive integer generation", field, raw)
}
