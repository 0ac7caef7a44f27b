package settle_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/settle"
)

func TestNew_NamesTheBadField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := settle.Config{Guard: b.jobs.Guard, DB: b.env.Pool}
	for field, edit := range map[string]func(*settle.Config){
		"Guard is nil":               func(c *settle.Config) { c.Guard = nil },
		"DB is nil":                  func(c *settle.Config) { c.DB = nil },
		"Grace -1ns is negative":     func(c *settle.Config) { c.Grace = -1 },
		"UpdateTimeout -1ns":         func(c *settle.Config) { c.UpdateTimeout = -1 },
		"MaxAttempts -1 is negative": func(c *settle.Config) { c.MaxAttempts = -1 },
		"BackoffMin -1ns":            func(c *settle.Config) { c.BackoffMin = -1 },
		"BackoffMax -1ns":            func(c *settle.Config) { c.BackoffMax = -1 },
		"BackoffMax 1s is below":     func(c *settle.Config) { c.BackoffMin, c.BackoffMax = time.Minute, time.Second },
		"Interval -1ns":              func(c *settle.Config) { c.Interval = -1 },
		"MaxPerSweep -1":             func(c *settle.Config) { c.MaxPerSweep = -1 },
		"Concurrency -1":             func(c *settle.Config) { c.Concurrency = -1 },
		`Handlers["video"]`:          func(c *settle.Config) { c.Handlers = map[string]settle.Handler{"video": nil} },
		`Increments[""]`:             func(c *settle.Config) { c.Increments = map[string]settle.Increment{"": increments(nil)["video_ms"]} },
		"Handlers[\"v\\x00\"]: jobguard: value cannot be stored: holds U+0000": func(c *settle.Config) {
			c.Handlers = map[string]settle.Handler{"v\x00": handlers(nil, nil, nil)["video"]}
		},
		"Increments[\"m\\xff\"]: jobguard: value cannot be stored: is not valid UTF-8": func(c *settle.Config) {
			c.Increments = map[string]settle.Increment{"m\xff": increments(nil)["video_ms"]}
		},
		"Table":                           func(c *settle.Config) { c.Table = strings.Repeat("x", 64) },
		"Schema":                          func(c *settle.Config) { c.Schema = "a\x00b" },
		`Table: "missing" does not exist`: func(c *settle.Config) { c.Table = "missing" },
	} {
		cfg := ok
		edit(&cfg)
		_, err := settle.New(context.Background(), cfg)
		require.ErrorContains(t, err, field)
	}
	_, err := settle.New(context.Background(), ok)
	require.NoError(t, err)
}

func TestMigration_RunsTwice(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(settle.Migration)
	env.Exec(settle.Migration)
	jobs := fixture.Create(t, env, fixture.Default)
	_, err := settle.New(context.Background(), settle.Config{Guard: jobs.Guard, DB: env.Pool})
	require.NoError(t, err)
}

func TestNew_RefusesARecordsTableWithoutTheClaimColumn(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	first, err := fs.ReadFile(settle.MigrationFiles, "0001_job_settlements.sql")
	require.NoError(t, err)
	env.Exec(string(first))
	jobs := fixture.Create(t, env, fixture.Default)
	_, err = settle.New(context.Background(), settle.Config{Guard: jobs.Guard, DB: env.Pool})
	require.ErrorContains(t, err, "has no column claim (apply every file of MigrationFiles)")
	env.Exec(settle.Migration)
	_, err = settle.New(context.Background(), settle.Config{Guard: jobs.Guard, DB: env.Pool})
	require.NoError(t, err)
}

// A records table migrated up to the claim column but without the trigger
// that moves the claim with the attempts, or with the trigger disabled, is
// refused at New: its fence would not hold against a process of an older
// version.
func TestNew_RefusesARecordsTableWithoutTheClaimTrigger(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	for _, name := range []string{"0001_job_settlements.sql", "0002_job_settlements_claim.sql"} {
		sql, err := fs.ReadFile(settle.MigrationFiles, name)
		require.NoError(t, err)
		env.Exec(string(sql))
	}
	jobs := fixture.Create(t, env, fixture.Default)
	cfg := settle.Config{Guard: jobs.Guard, DB: env.Pool}
	const refused = "has no enabled trigger claim_follows_attempts (apply every file of MigrationFiles)"
	_, err := settle.New(context.Background(), cfg)
	require.ErrorContains(t, err, refused)

	env.Exec(settle.Migration)
	_, err = settle.New(context.Background(), cfg)
	require.NoError(t, err)

	for _, disable := range []string{"DISABLE TRIGGER claim_follows_attempts", "ENABLE REPLICA TRIGGER claim_follows_attempts"} {
		env.Exec(`ALTER TABLE job_settlements ` + disable)
		_, err = settle.New(context.Background(), cfg)
		require.ErrorContains(t, err, refused, disable)
	}
	env.Exec(`ALTER TABLE job_settlements ENABLE ALWAYS TRIGGER claim_follows_attempts`)
	_, err = settle.New(context.Background(), cfg)
	require.NoError(t, err)
}
