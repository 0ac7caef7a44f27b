package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

var versionCommand = &command{
	name:  "version",
	short: "the command's version, the library's, and Go's",
	long: `
Version prints the version of the command and of the library it was built
with, as the build recorded them ("(devel)" for a build from a checkout),
and the Go version.`,
	flags: func(f *flags, s *settings) { f.outputGroup(s, false) },
	run:   version,
}

// libraryPath is the library's module path.
const libraryPath = "github.com/jobguard/jobguard"

func version(_ context.Context, c *cli, s *settings, args []string) error {
	if len(args) > 0 {
		return usageErr("version takes no arguments; got %q", args)
	}
	cmd, lib := "(unknown)", "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		cmd = bi.Main.Version
		for _, d := range bi.Deps {
			if d.Path == libraryPath {
				lib = d.Version
				if d.Replace != nil {
					lib += " => " + d.Replace.Path
				}
			}
		}
	}
	if s.JSON {
		return printJSON(c.stdout, map[string]string{"command": cmd, "library": lib, "go": runtime.Version()})
	}
	fmt.Fprintf(c.stdout, "jobguard %s (library %s, %s)\n", cmd, lib, runtime.Version())
	return nil
}
