// Package endpoint finds the PostgreSQL and Redis servers that the tests and
// the demo talk to.
//
// Resolution order, for each server on its own:
//  1. JOBGUARD_DATABASE_URL / JOBGUARD_REDIS_URL when set;
//  2. the local defaults (postgres://postgres@127.0.0.1:5432/test and
//     redis://127.0.0.1:6379/0) when they answer;
//  3. a container started with testcontainers when a Docker engine answers;
//  4. otherwise an error that says exactly what to set.
//
// JOBGUARD_REDIS_URL=none (NoRedis) resolves no Redis at all: RedisURL is
// empty, for the runs that prove a deployment without Redis works.
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/jobguard/jobguard/internal/redact"
)

// Environment variables that override the local defaults.
const (
	DatabaseEnv = "JOBGUARD_DATABASE_URL"
	RedisEnv    = "JOBGUARD_REDIS_URL"
)

// NoRedis, as RedisEnv, resolves no Redis server.
const NoRedis = "none"

// Local defaults, tried when the environment names no server.
const (
	DatabaseDefault = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	RedisDefault    = "redis://127.0.0.1:6379/0"
)

// Endpoints are the resolved connection URLs.
type Endpoints struct {
	DatabaseURL string
	RedisURL    string
	// Close stops any container that resolution started. It is never nil.
	Close func(context.Context) error
}

// Resolve finds both servers. Log, when not nil, is told which source each
// URL came from.
func Resolve(ctx context.Context, log func(format string, args ...any)) (Endpoints, error) {
	if log == nil {
		log = func(string, ...any) {}
	}
	var closers []func(context.Context) error
	ep := Endpoints{}
	ep.Close = func(ctx context.Context) error {
		var errs []error
		for _, c := range closers {
			errs = append(errs, c(ctx))
		}
		return errors.Join(errs...)
	}

	db, closeDB, err := resolve(ctx, log, server{
		name: "PostgreSQL", env: DatabaseEnv, local: DatabaseDefault,
		image: "postgres:16-alpine", port: "5432/tcp",
		containerEnv: map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust", "POSTGRES_DB": "test"},
		wait:         wait.ForLog("database system is ready to accept connections").WithOccurrence(2),
		url:          func(hostPort string) string { return "postgres://postgres@" + hostPort + "/test?sslmode=disable" },
	})
	if err != nil {
		return ep, err
	}
	if closeDB != nil {
		closers = append(closers, closeDB)
	}
	if os.Getenv(RedisEnv) == NoRedis {
		log("Redis: none (%s=%s)", RedisEnv, NoRedis)
		ep.DatabaseURL = db
		return ep, nil
	}
	rd, closeRedis, err := resolve(ctx, log, server{
		name: "Redis", env: RedisEnv, local: RedisDefault,
		image: "redis:7-alpine", port: "6379/tcp",
		wait: wait.ForListeningPort("6379/tcp"),
		url:  func(hostPort string) string { return "redis://" + hostPort + "/0" },
	})
	if err != nil {
		_ = ep.Close(ctx)
		return ep, err
	}
	if closeRedis != nil {
		closers = append(closers, closeRedis)
	}
	ep.DatabaseURL, ep.RedisURL = db, rd
	return ep, nil
}

type server struct {
	name, env, local, image, port string
	containerEnv                  map[string]string
	wait                          interface {
		WaitUntilReady(context.Context, wait.StrategyTarget) error
	}
	url func(hostPort string) string
}

func resolve(ctx context.Context, log func(string, ...any), s server) (string, func(context.Context) error, error) {
	if u := os.Getenv(s.env); u != "" {
		log("%s: %s (from %s)", s.name, redact.String(u), s.env)
		return u, nil, nil
	}
	if answers(ctx, s.local) {
		log("%s: %s (local default)", s.name, s.local)
		return s.local, nil, nil
	}
	c, err := testcontainers.Run(ctx, s.image,
		testcontainers.WithExposedPorts(s.port),
		testcontainers.WithEnv(s.containerEnv),
		testcontainers.WithWaitStrategyAndDeadline(2*time.Minute, s.wait),
	)
	if err != nil {
		if c != nil {
			_ = c.Terminate(ctx)
		}
		return "", nil, fmt.Errorf("no %s server: %s is not set, nothing answers at %s, "+
			"and no container could be started (%v); set %s to a reachable server's URL",
			s.name, s.env, s.local, err, s.env)
	}
	hostPort, err := c.PortEndpoint(ctx, s.port, "")
	if err != nil {
		_ = c.Terminate(ctx)
		return "", nil, fmt.Errorf("%s container started but its port is unknown: %w", s.name, err)
	}
	u := s.url(hostPort)
	log("%s: %s (container %s)", s.name, u, s.image)
	return u, func(ctx context.Context) error { return c.Terminate(ctx) }, nil
}

// answers reports whether something accepts TCP connections at the URL's
// host and port. It does not authenticate: a wrong password still surfaces as
// a clear error at the first real connection.
func answers(ctx context.Context, rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}
