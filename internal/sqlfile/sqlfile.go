// Package sqlfile exposes the migration files that a package embeds.
package sqlfile

import (
	"embed"
	"io/fs"
	"strings"
)

// Load returns the files under dir of f, and their SQL joined in name order
// as one string. The files are fixed at build time, so a failure here is a
// broken build and panics.
func Load(f embed.FS, dir string) (fs.FS, string) {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	names, err := fs.Glob(sub, "*.sql")
	if err != nil || len(names) == 0 {
		panic("sqlfile: no SQL files under " + dir)
	}
	var all strings.Builder
	for _, n := range names { // fs.Glob returns names in lexical order
		b, err := fs.ReadFile(sub, n)
		if err != nil {
			panic(err)
		}
		all.Write(b)
		all.WriteString("\n")
	}
	return sub, all.String()
}
