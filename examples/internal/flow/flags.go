package flow

import (
	"flag"
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
