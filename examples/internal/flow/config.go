package flow

import (
	"hash/fnv"

	"github.com/jobguard/jobguard/jobguard"
)

// Defaults of Config.
const (
	DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	RedisURLDefault    = "redis://127.0.0.1:6379/0"
	SchemaDefault      = "jobguard_examples"
	PrefixDefault      = "jobguard-examples"
	NoticesDefault     = NoticesRedis
)

// The transports of reclaim notices (Config.Notices).
const (
	// NoticesRedis carries notices over Redis pub/sub.
	NoticesRedis = "redis"
	// NoticesPostgres carries notices with Postgres LISTEN/NOTIFY.
	NoticesPostgres = "postgres"
	// NoticesOff sends and watches no notices: a reclaimed execution runs
	// until its call returns, and only its guarded writes are refused.
	NoticesOff = "off"
)

// Config says where the examples keep their state, and what every process
// of them must agree on.
type Config struct {
	// DatabaseURL reaches PostgreSQL. Defaults to DatabaseURLDefault.
	DatabaseURL string
	// Schema holds every table; it is created when missing and is the
	// search_path of every connection. Defaults to SchemaDefault.
	Schema string
	// RedisURL reaches Redis. Defaults to RedisURLDefault.
	RedisURL string
	// Prefix namespaces the reclaim markers and the notice channel in
	// Redis. The reclaimer and the processors must agree on it. Defaults to
	// PrefixDefault.
	Prefix string
	// Notices is how reclaim notices travel from the reclaimer to the
	// workers' watcher: NoticesRedis (on a channel under Prefix),
	// NoticesPostgres (LISTEN/NOTIFY in the database) or NoticesOff. The
	// reclaimer and the processors must agree on it. Defaults to
	// NoticesDefault.
	Notices string
}

// withDefaults returns c with every empty field set to its default.
func (c Config) withDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.DatabaseURL, DatabaseURLDefault)
	def(&c.Schema, SchemaDefault)
	def(&c.RedisURL, RedisURLDefault)
	def(&c.Prefix, PrefixDefault)
	def(&c.Notices, NoticesDefault)
	return c
}

// Shared returns the settings that the guard of every process of the
// examples carries (jobguard.GuardConfig.Shared), so that the reclaimer
// and the processors agree on them: the Redis prefix of the markers and
// notices, and the reclaimers' leader key, derived from the schema. The
// examples keep their markers in Redis, which they tell the story with.
func (c Config) Shared() jobguard.Shared {
	c = c.withDefaults()
	return jobguard.Shared{Prefix: c.Prefix, LeaderKey: leaderKey(c.Schema), Markers: jobguard.MarkersRedis}
}

// leaderKey derives the reclaimer's advisory lock key from the schema, so
// that reclaimers of one schema elect one leader and those of different
// schemas on one server do not block each other.
func leaderKey(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("jobguard-examples:" + schema))
	return int64(h.Sum64() >> 1)
}
