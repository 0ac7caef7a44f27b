package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/internal/spell"
)

// flags is one command's flag set, with its flags grouped in sections for
// --help: the standard library's flag package, with the order and the
// headings that PrintDefaults lacks.
type flags struct {
	fs       *flag.FlagSet
	sections []section
	// tableFlags are the names of the flags of the jobs table's mapping.
	tableFlags []string
}

// section is a heading of --help and the flags under it, in order.
type section struct {
	title string
	names []string
}

func newFlags(name string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by the caller
	return &flags{fs: fs}
}

// section starts a new heading; the flags defined after it go under it.
func (f *flags) section(title string) { f.sections = append(f.sections, section{title: title}) }

func (f *flags) add(name string) {
	if len(f.sections) == 0 {
		f.section("Flags")
	}
	s := &f.sections[len(f.sections)-1]
	s.names = append(s.names, name)
}

func (f *flags) str(p *string, name, usage string) {
	f.fs.StringVar(p, name, *p, usage)
	f.add(name)
}

func (f *flags) boolean(p *bool, name, usage string) {
	f.fs.BoolVar(p, name, *p, usage)
	f.add(name)
}

func (f *flags) duration(p *time.Duration, name, usage string) {
	f.fs.DurationVar(p, name, *p, usage)
	f.add(name)
}

func (f *flags) integer(p *int, name, usage string) {
	f.fs.IntVar(p, name, *p, usage)
	f.add(name)
}

func (f *flags) int64(p *int64, name, usage string) {
	f.fs.Int64Var(p, name, *p, usage)
	f.add(name)
}

func (f *flags) float(p *float64, name, usage string) {
	f.fs.Float64Var(p, name, *p, usage)
	f.add(name)
}

// parse parses args, flags and arguments in any order (flags may follow
// the job id, as operators type them), and returns the arguments. "--"
// ends the flags. errHelp is returned for -h, -help and --help.
func (f *flags) parse(args []string) ([]string, error) {
	var rest []string
	for {
		if err := f.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			// The flag package names an unknown flag only in its message.
			if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
				var known []string
				f.fs.VisitAll(func(fl *flag.Flag) { known = append(known, fl.Name) })
				return nil, usageErr("%v%s", err, spell.Hint(strings.TrimPrefix(name, "-"), known, "--%s"))
			}
			return nil, usageErr("%v", err)
		}
		left := f.fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		// Parse stops at the first argument, or just after a "--", which
		// it drops: after one, every argument is an argument.
		if consumed := len(args) - len(left); consumed > 0 && args[consumed-1] == "--" {
			return append(rest, left...), nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// jsonArg reports whether args ask for --json (or -json, --json=true),
// before "--": what the parsed flags will say, for the errors that come
// before they are parsed or from parsing them.
func jsonArg(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		on = !hasValue
		if hasValue {
			on, _ = strconv.ParseBool(value)
		}
	}
	return on
}

// usage writes the flags of every section, as PrintDefaults would, under
// their headings. The defaults, which the config file sets, go through
// red.
func (f *flags) usage(w io.Writer, red *redact.Redactor) {
	for _, s := range f.sections {
		if len(s.names) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", s.title)
		for _, name := range s.names {
			fl := f.fs.Lookup(name)
			typ, usage := flag.UnquoteUsage(fl)
			line := "  --" + name
			if typ != "" {
				line += " " + typ
			}
			def := red.String(fl.DefValue)
			switch {
			case typ == "" && def == "false", def == "", def == "0" && typ == "int":
				def = ""
			case typ == "string":
				def = fmt.Sprintf("%q", def)
			}
			if def != "" {
				line += " (default " + def + ")"
			}
			fmt.Fprintf(w, "%s\n", line)
			for _, l := range wrap(usage, 72) {
				fmt.Fprintf(w, "      %s\n", l)
			}
		}
	}
}

// wrap breaks s into lines of at most width bytes, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	var line strings.Builder
	for _, word := range strings.Fields(s) {
		if line.Len() > 0 && line.Len()+1+len(word) > width {
			lines = append(lines, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(word)
	}
	if line.Len() > 0 {
		lines = append(lines, line.String())
	}
	return lines
}
