package main

import (
	"context"
	"runtime"
	"runtime/debug"
)

var versionCommand = &command{
	name:  "version",
	short: "the build, for a bug report: versions, VCS revision, Go, platform",
	long: `
Version prints what a bug report needs: the version of the command and of
the library it was built with, as the build recorded them ("(devel)" for a
build from a checkout), the VCS revision the build came from, its commit
time and whether the checkout had uncommitted changes, the Go version, and
the operating system and architecture.

A build records its revision when it is made inside a git checkout, except
in a workspace (the checkout's go.work) without -buildvcs=true:

  go install -buildvcs=true ./cmd/jobguard`,
	flags: func(f *flags, s *settings) { f.outputGroup(s, false) },
	run:   version,
}

// libraryPath is the library's module path.
const libraryPath = "github.com/jobguard/jobguard"

// buildInfo is what version prints. The VCS fields are nil when the build
// did not record them.
type buildInfo struct {
	Command  string  `json:"command"`
	Library  string  `json:"library"`
	Revision *string `json:"revision"`
	Time     *string `json:"time"`
	Modified *bool   `json:"modified"`
	Go       string  `json:"go"`
	OS       string  `json:"os"`
	Arch     string  `json:"arch"`
}

// readBuildInfo reads what the build recorded in the binary.
func readBuildInfo() buildInfo {
	v := buildInfo{Command: "(unknown)", Library: "(unknown)", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Command = bi.Main.Version
	for _, d := range bi.Deps {
		if d.Path == libraryPath {
			v.Library = d.Version
			if d.Replace != nil {
				v.Library += " => " + d.Replace.Path
			}
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = &s.Value
		case "vcs.time":
			v.Time = &s.Value
		case "vcs.modified":
			m := s.Value == "true"
			v.Modified = &m
		}
	}
	return v
}

func version(_ context.Context, c *cli, s *settings, _ []string) error {
	v := readBuildInfo()
	if s.JSON {
		return printJSON(c.stdout, v)
	}
	revision := "not recorded (build with -buildvcs=true)"
	if v.Revision != nil {
		revision = *v.Revision
		if v.Time != nil {
			revision += " (" + *v.Time + ")"
		}
		if v.Modified != nil && *v.Modified {
			revision += ", modified: uncommitted changes"
		}
	}
	t := newTable(c.stdout, "jobguard "+v.Command)
	t.row("  library", v.Library)
	t.row("  revision", revision)
	t.row("  go", v.Go+" "+v.OS+"/"+v.Arch)
	return t.flush()
}
