package flow

import (
	"flag"
	"hash/fnv"
	"os"
)

// Flags registers the connection flags every example command takes, with
// the environment variables the tests use as their defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.DatabaseURL, "database", envOr("JOBGUARD_DATABASE_URL", DatabaseURLDefault),
		"PostgreSQL URL (env JOBGUARD_DATABASE_URL)")
	fs.StringVar(&c.RedisURL, "redis", envOr("JOBGUARD_REDIS_URL", RedisURLDefault),
		"Redis URL (env JOBGUARD_REDIS_URL)")
	fs.StringVar(&c.Schema, "schema", SchemaDefault, "schema that holds the examples' tables (created if missing)")
	fs.StringVar(&c.Prefix, "prefix", PrefixDefault, "Redis key prefix of the reclaim markers (and of the notice channel)")
	fs.StringVar(&c.Notices, "notices", NoticesDefault,
		"how reclaim notices reach the workers, to cancel a reclaimed execution's work: redis, postgres or off")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// leaderKey derives the reclaimer's advisory lock key from the schema, so
// that reclaimers of one schema elect one leader and those of different
// schemas on one server do not block each other.
func leaderKey(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("jobguard-examples:" + schema))
	return int64(h.Sum64() >> 1)
}
