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
}

// Source lists a BullMQ queue's active jobs. It is safe for concurrent use.
type Source struct {
	rdb    Redis
	active string
	jobKey string
	field  string
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
	return &Source{rdb: cfg.Redis, active: base + "active", jobKey: base, field: cfg.RowIDField}, nil
}

// snapshot reads the active list and every listed job's start time, name
// and (when asked) data in one script, so the list and the hashes are one
// consistent state: a job cannot leave the list between the two reads.
// The job keys share the list's slot because BullMQ's prefix carries the
// queue's hash tag on Cluster.
var snapshot = redis.NewScript(`
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
local out = {}
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
  out[i] = {ids[i], kind, f[1] or false, f[2] or false, f[3] or false}
end
return out
`)

// Active returns the queue's active jobs. StartedAt is the job's
// processedOn: BullMQ sets it, in the worker's clock, every time the job
// moves to active, so it measures the current attempt (a retried job starts
// over). The type is the job's name. A listed id without a hash is returned
// with ErrNoJobHash; one without processedOn with a zero StartedAt; both are
// skipped by the sweep and counted.
func (s *Source) Active(ctx context.Context) ([]reclaim.ActiveJob, error) {
	withData := "0"
	if s.field != "" {
		withData = "1"
	}
	v, err := snapshot.Run(ctx, s.rdb, []string{s.active}, s.jobKey, withData).Slice()
	if err != nil {
		return nil, fmt.Errorf("bullmq: read %s: %w", s.active, err)
	}
	out := make([]reclaim.ActiveJob, 0, len(v))
	for _, e := range v {
		f, ok := e.([]any)
		if !ok || len(f) != 5 {
			return nil, fmt.Errorf("bullmq: read %s: unexpected reply %v", s.active, e)
		}
		id, kind := str(f[0]), str(f[1])
		processedOn, name, data := str(f[2]), str(f[3]), str(f[4])
		job := reclaim.ActiveJob{ID: id, Type: name}
		switch kind {
		case "none":
			job.Err = fmt.Errorf("%w: %s%s", ErrNoJobHash, s.jobKey, id)
		case "hash":
			if processedOn != "" {
				job.StartedAt, job.Err = parseMillis(processedOn)
			}
			if job.Err == nil && s.field != "" {
				var row string
				if row, job.Err = rowID(data, s.field); job.Err == nil {
					job.ID = row
				}
			}
			if job.Err != nil {
				job.Err = fmt.Errorf("bullmq: job %s: %w", id, job.Err)
			}
		default:
			job.Err = fmt.Errorf("%w: %s%s holds a %s", ErrNoJobHash, s.jobKey, id, kind)
		}
		out = append(out, job)
	}
	return out, nil
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
