package flow

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The Go snippets of examples/README.md are excerpts of this package's
// code or of the commands' (their wiring), so they compile with it and
// cannot drift from it.
func TestReadme_GoSnippetsAreExcerptsOfTheCode(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	commands, err := filepath.Glob(filepath.Join("..", "..", "*", "*.go"))
	require.NoError(t, err)
	files = append(files, commands...)
	var code strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		code.Write(b)
	}
	space := regexp.MustCompile(`\s+`)
	norm := func(s string) string { return space.ReplaceAllString(strings.TrimSpace(s), " ") }
	source := norm(code.String())

	snippets := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, snippets)
	for _, s := range snippets {
		require.Contains(t, source, norm(s[1]), "README snippet is not in examples/internal/flow or a command")
	}
}
