package flow

import (
	"flag"
	"os"

	"github.com/jobguard/jobguard/internal/redact"
)

// Flags registers the connection flags every example command takes, with
// the environment variables the tests use as their defaults. The help shows
// a default URL without its password.
func (c *Config) Flags(fs *flag.FlagSet) {
	c.DatabaseURL = envOr("JOBGUARD_DATABASE_URL", DatabaseURLDefault)
	fs.Var(urlFlag{&c.DatabaseURL}, "database", "PostgreSQL `URL` (env JOBGUARD_DATABASE_URL)")
	c.RedisURL = envOr("JOBGUARD_REDIS_URL", RedisURLDefault)
	fs.Var(urlFlag{&c.RedisURL}, "redis", "Redis `URL` (env JOBGUARD_REDIS_URL)")
	fs.StringVar(&c.Schema, "schema", SchemaDefault, "schema that holds the examples' tables (created if missing)")
	fs.StringVar(&c.Prefix, "prefix", PrefixDefault, "Redis key prefix of the reclaim markers (and of the notice channel)")
	fs.StringVar(&c.Notices, "notices", NoticesDefault,
		"how reclaim notices reach the workers, to cancel a reclaimed execution's work: redis, postgres or off")
}

// urlFlag is a server URL, which may hold a password: it prints redacted.
type urlFlag struct{ p *string }

func (u urlFlag) String() string {
	if u.p == nil {
		return ""
	}
	return redact.String(*u.p)
}

func (u urlFlag) Set(v string) error {
	*u.p = v
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
