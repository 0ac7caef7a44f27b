// Package readme_test compiles the Go snippets of the top-level README, so
// the quickstart a new user copies cannot drift from the API.
package readme_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// template gives the snippets what they refer to without declaring it.
const template = `package snippet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
	"github.com/jobguard/jobguard/watch"
)

var (
	_ = fmt.Errorf
	_ = errors.Is
	_ = json.Unmarshal
	_ = jobguard.New
	_ = settle.New
	_ = usage.Accrue
	_ = watch.New
)

type course struct{}

func generateWeeks(context.Context, course) ([]string, error)     { return nil, nil }
func saveWeeks(context.Context, pgx.Tx, course, []string) error { return nil }

%s

func snippet(ctx context.Context, pool *pgxpool.Pool, rdb redis.UniversalClient, jobID string, course course) error {
%s
}
`

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

func TestREADMESnippetsCompile(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go snippets")
	}
	// A directory starting with "_" is left out of ./... but builds when named.
	dir, err := os.MkdirTemp(".", "_snippets")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	for i, b := range blocks {
		code := b[1]
		decls, body := "", code
		if strings.HasPrefix(code, "var ") || strings.HasPrefix(code, "func ") {
			decls, body = code, "\treturn nil"
		}
		sub := filepath.Join(dir, fmt.Sprintf("s%d", i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "snippet.go"), fmt.Appendf(nil, template, decls, body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("go", "build", "./"+filepath.ToSlash(sub)).CombinedOutput()
		if err != nil {
			t.Errorf("README snippet %d does not compile:\n%s\n%s", i+1, out, code)
		}
	}
}
