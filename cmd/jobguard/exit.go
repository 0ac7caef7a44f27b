package main

import (
	"errors"
	"fmt"
)

// The exit codes, which scripts may branch on. The package doc lists them.
const (
	// exitOK: the command did what it was asked.
	exitOK = 0
	// exitError: it could not: a server, the table mapping, a write.
	exitError = 1
	// exitUsage: the command line is wrong: an unknown command or flag, a
	// missing or malformed argument (a job id that is not one).
	exitUsage = 2
	// exitNotFound: the job does not exist in the mapped table.
	exitNotFound = 3
	// exitRefused: the job exists, and its status does not allow what was
	// asked (a retry of a job that is not FAILED).
	exitRefused = 4
)

// errHelp is returned by a command's flag parsing for --help: the help is
// printed and the command exits 0.
var errHelp = errors.New("help requested")

// failure is an error that ends the command with code, and says what to
// do about it.
type failure struct {
	code int
	err  error
	// todo says what the operator can do; empty when the error says it.
	todo string
}

func (f *failure) Error() string { return f.err.Error() }

func (f *failure) Unwrap() error { return f.err }

// fail wraps err to end the command with code, suggesting todo.
func fail(code int, err error, todo string, args ...any) error {
	return &failure{code: code, err: err, todo: fmt.Sprintf(todo, args...)}
}

// usageErr is a command-line mistake: exit 2.
func usageErr(format string, args ...any) error {
	return &failure{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// exitCode is the code err ends the command with.
func exitCode(err error) int {
	var f *failure
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &f):
		return f.code
	}
	return exitError
}

// todoOf is what err says to do, if anything.
func todoOf(err error) string {
	var f *failure
	if errors.As(err, &f) {
		if f.todo != "" {
			return f.todo
		}
		return todoOf(f.err)
	}
	return ""
}
