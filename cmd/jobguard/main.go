package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/internal/service"
	"github.com/jobguard/jobguard/internal/spell"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, the default behaviour comes back: a second
	// one ends the process at once, should the shutdown hang.
	go func() { <-ctx.Done(); stop() }()
	c := &cli{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, terminal: isTerminal()}
	// go-redis logs on its own (a pool that cannot dial, once per
	// attempt): through the command's logger, at debug, its lines are
	// redacted, shaped like the rest, and out of the way of the command's
	// own message about the same failure.
	redis.SetLogger(redisLogs{c})
	code := c.main(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// cli is one invocation: where it writes and what it reads of its
// environment.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// terminal is true when stdout and stderr are terminals: only then
	// does a long scan show its progress.
	terminal bool

	// red masks the passwords of the servers' URLs, those of the
	// arguments and of the environment included, in everything the command
	// prints: errors, logs, help, results. main sets it, and passes stdout
	// and stderr through it; nil masks what the textual rule finds.
	red *redact.Redactor
	// logs is the logger built by logger, once it is.
	logs atomic.Pointer[slog.Logger]
	// json is true when errors are printed as JSON: --json on the command
	// line, as the parsed flags say, or before they are (or when they
	// cannot be), as jsonArg reads it.
	json bool
}

// command is one of the commands.
type command struct {
	// name is how it is called: "explain", "limits set".
	name string
	// args is its arguments as the synopsis writes them.
	args string
	// short is the line of 'jobguard --help'.
	short string
	// long is the text of its --help, before the flags.
	long string
	// flags defines its flags over the settings.
	flags func(f *flags, s *settings)
	// run runs it with its arguments.
	run func(ctx context.Context, c *cli, s *settings, args []string) error
}

// commands are listed in this order by --help.
func commands() []*command {
	return []*command{explainCommand, sweepCommand, limitsListCommand, limitsSetCommand, limitsPauseCommand,
		limitsResumeCommand, limitsSuggestCommand,
		retryCommand, cancelCommand, retainCommand, runCommand, versionCommand}
}

// main runs the command args name and returns the exit code.
func (c *cli) main(ctx context.Context, args []string) int {
	c.red = redact.New(append(slices.Clone(args), c.getenv(envDatabaseURL), c.getenv(envRedisURL), c.getenv(envConfig))...)
	// Every byte the command prints passes here: what it read from the
	// servers (a failure reason that quotes a worker's URL) as well as
	// what it was given, whichever command prints it.
	stdout, stderr := c.red.Writer(c.stdout), c.red.Writer(c.stderr)
	c.stdout, c.stderr = stdout, stderr
	defer func() { _, _ = stdout.Flush(), stderr.Flush() }()
	c.json = jsonArg(args)
	if len(args) == 0 {
		c.help(c.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return c.helpCommand(args[1:])
	}
	cmd, rest, err := find(args)
	if err != nil {
		return c.report(nil, err)
	}
	s, err := loadSettings(rest, c.getenv)
	if err != nil {
		return c.report(cmd, err)
	}
	f := newFlags("jobguard " + cmd.name)
	cmd.flags(f, &s)
	positional, err := f.parse(rest)
	if errors.Is(err, errHelp) {
		c.commandHelp(c.stdout, cmd, f)
		return exitOK
	}
	if err == nil {
		c.json = s.JSON
		s.fromEnv(c.getenv, f)
		s.ownTable(f)
		err = s.check()
	}
	if err == nil {
		err = c.run(ctx, cmd, &s, positional)
	}
	return c.report(cmd, err)
}

// run runs cmd. A panic becomes its error, with the stack, so that it is
// printed redacted, as every error is, and ends the command with exit 1.
func (c *cli) run(ctx context.Context, cmd *command, s *settings, args []string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fail(exitError, fmt.Errorf("panic: %v\n%s", v, debug.Stack()),
				"this is a bug in jobguard: please report it, with the lines above")
		}
	}()
	// A command whose synopsis names no arguments takes none.
	if cmd.args == "" && len(args) > 0 {
		return usageErr("%s takes no arguments; got %q", cmd.name, args)
	}
	return cmd.run(ctx, c, s, args)
}

// find returns the command args name, and the arguments after its name.
func find(args []string) (*command, []string, error) {
	if args[0] == "limits" {
		if len(args) < 2 || strings.HasPrefix(args[1], "-") {
			return nil, nil, usageErr("limits needs a subcommand: list, set or suggest")
		}
		args = append([]string{"limits " + args[1]}, args[2:]...)
	}
	// The names a mistyped one is compared with: the first words of the
	// commands, or, after "limits", its subcommands.
	sub, isLimits := strings.CutPrefix(args[0], "limits ")
	var names []string
	for _, cmd := range commands() {
		if cmd.name == args[0] {
			return cmd, args[1:], nil
		}
		first, rest, _ := strings.Cut(cmd.name, " ")
		switch {
		case isLimits && first == "limits":
			names = append(names, rest)
		case !isLimits && !slices.Contains(names, first):
			names = append(names, first)
		}
	}
	if isLimits {
		return nil, nil, usageErr("unknown command %q%s", args[0], spell.Hint(sub, names, `"limits %s"`))
	}
	return nil, nil, usageErr("unknown command %q%s", args[0], spell.Hint(args[0], append(names, "help"), "%q"))
}

// fromEnv takes the servers' URLs from the environment when their flags
// are not set: the flags' defaults do not show them, as a URL may hold a
// password.
func (s *settings) fromEnv(getenv func(string) string, f *flags) {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	switch v := getenv(envDatabaseURL); {
	case set["database-url"]:
		s.DatabaseURLFrom = "--database-url"
	case v != "":
		s.DatabaseURL, s.DatabaseURLFrom = v, envDatabaseURL
	}
	if v := getenv(envMarkers); v != "" && !set["markers"] {
		s.Markers = v
	}
	switch v := getenv(envRedisURL); {
	case set["redis-url"]:
		s.RedisURLFrom = "--redis-url"
	case v != "":
		s.RedisURL, s.RedisURLFrom = v, envRedisURL
	}
}

// report writes err, and what to do about it, to stderr and returns the
// exit code it ends the command with. With --json it is one JSON object on
// one line: the command, the error, the hint (what to do, and where the
// usage is for a usage error) and the exit code.
func (c *cli) report(cmd *command, err error) int {
	code := exitCode(err)
	if code == exitOK {
		return code
	}
	name := "jobguard"
	if cmd != nil {
		name += " " + cmd.name
	}
	// Redacted before it is encoded, so that no escaping hides a password
	// from the redactor; the redacting writer sees the result too.
	msg, todo := c.red.String(err.Error()), c.red.String(todoOf(err))
	var usage string
	if code == exitUsage {
		usage = fmt.Sprintf("Run '%s --help' for usage.", name)
	}
	if c.json {
		hint := strings.TrimSpace(todo + "\n" + usage)
		line, _ := json.Marshal(struct {
			Command string `json:"command"`
			Error   string `json:"error"`
			Hint    string `json:"hint,omitempty"`
			Code    int    `json:"code"`
		}{name, msg, hint, code})
		fmt.Fprintf(c.stderr, "%s\n", line)
		return code
	}
	fmt.Fprintf(c.stderr, "%s: %s\n", name, msg)
	if todo != "" {
		fmt.Fprintf(c.stderr, "%s\n", todo)
	}
	if usage != "" {
		fmt.Fprintf(c.stderr, "%s\n", usage)
	}
	return code
}

// logger is the logger of the library's calls: text or JSON on stderr,
// redacted.
func (c *cli) logger(s *settings) (*slog.Logger, error) {
	h, err := service.Handler(c.stderr, s.LogFormat, s.LogLevel)
	if err != nil {
		return nil, usageErr("--%v", err)
	}
	log := slog.New(c.red.Handler(h))
	c.logs.Store(log)
	return log, nil
}

// redisLogs are go-redis's log lines, as debug lines of the command's
// logger, shown at --log-level debug only. Before there is a logger, and
// in the commands without one, they are dropped: what they say of a
// failure, the command says once in its error.
type redisLogs struct{ c *cli }

func (r redisLogs) Printf(ctx context.Context, format string, v ...any) {
	if log := r.c.logs.Load(); log != nil {
		log.DebugContext(ctx, fmt.Sprintf(format, v...), slog.String("from", "go-redis"))
	}
}

// isTerminal reports whether stdout and stderr are character devices
// (terminals, as far as the standard library can tell).
func isTerminal() bool {
	for _, f := range []*os.File{os.Stdout, os.Stderr} {
		fi, err := f.Stat()
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return false
		}
	}
	return true
}
