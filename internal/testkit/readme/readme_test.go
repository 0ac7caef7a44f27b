// Package readme_test checks the top-level README against the code: every
// Go block compiles, and every SQL block runs on the table it is written
// for, so the quickstart a new user copies cannot drift from the API.
package readme_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// template gives the snippets what they refer to without declaring it.
const template = `package snippet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
	"github.com/jobguard/jobguard/watch"
)

var (
	_ = fmt.Errorf
	_ = errors.Is
	_ = json.Unmarshal
	_ = heartbeat.New
	_ = jobguard.New
	_ = jobset.New
	_ = marker.Migration
	_ = reclaim.New
	_ = settle.New
	_ = usage.Accrue
	_ = watch.New
	_ = time.Second
)

type course struct{}

func generateWeeks(context.Context, course) ([]string, error)     { return nil, nil }
func saveWeeks(context.Context, pgx.Tx, course, []string) error { return nil }

%s

func snippet(ctx context.Context, pool *pgxpool.Pool, rdb redis.UniversalClient, jobID string, course course) error {
%s
}
`

// blocks returns the bodies of the README's code blocks in language lang.
func blocks(t *testing.T, lang string) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	require.NoError(t, err)
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		out = append(out, m[1])
	}
	require.NotEmpty(t, out, "README.md has no %s blocks", lang)
	return out
}

// Every Go block compiles, in one build: a block of declarations (var,
// func) at the top level, any other as the body of a function that has a
// pool, a Redis client, a job id and a course.
func TestREADMESnippetsCompile(t *testing.T) {
	t.Parallel()
	code := blocks(t, "go")
	// A directory starting with "_" is left out of ./... but builds when named.
	dir, err := os.MkdirTemp(".", "_snippets")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	args := []string{"build"}
	for i, c := range code {
		decls, body := "", c
		if strings.HasPrefix(c, "var ") || strings.HasPrefix(c, "func ") {
			decls, body = c, "\treturn nil"
		}
		sub := filepath.Join(dir, fmt.Sprintf("s%d", i+1))
		require.NoError(t, os.Mkdir(sub, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sub, "snippet.go"), fmt.Appendf(nil, template, decls, body), 0o644))
		// Named one by one: a pattern's "..." skips directories whose
		// names start with "_".
		args = append(args, "./"+filepath.ToSlash(sub))
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		// The build names each failing block by its directory, s<n>: the
		// n-th Go block of the README.
		t.Errorf("README Go blocks do not compile (s<n> is the n-th block):\n%s", out)
		for i, c := range code {
			if strings.Contains(string(out), fmt.Sprintf("s%d/", i+1)) {
				t.Errorf("block %d:\n%s", i+1, c)
			}
		}
	}
}

// Every SQL block runs on the table it is written for: the README's own
// Prisma-style table, created by its CREATE TABLE block in a fresh schema,
// and each index block makes a partial index on it.
func TestREADMESQLRunsOnItsTable(t *testing.T) {
	t.Parallel()
	table, indexes := sqlBlocks(t)
	for i, sql := range indexes {
		t.Run(fmt.Sprintf("index block %d", i+1), func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			_, err := env.Pool.Exec(context.Background(), table)
			require.NoError(t, err, table)
			_, err = env.Pool.Exec(context.Background(), sql)
			require.NoError(t, err, sql)
			var partial int
			// pg_index of this one table: pg_indexes would print the
			// definitions of every index, those of tables being dropped
			// beside this test included.
			require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_index
				WHERE indrelid = '"CourseJob"'::regclass AND indpred IS NOT NULL`).Scan(&partial))
			require.Equal(t, strings.Count(sql, "CREATE INDEX"), partial, "each statement makes a partial index")
		})
	}
}

// sqlBlocks returns the README's one SQL block that creates the
// Prisma-style table, and its index blocks.
func sqlBlocks(t *testing.T) (table string, indexes []string) {
	t.Helper()
	var tables []string
	for _, sql := range blocks(t, "sql") {
		if strings.Contains(sql, "CREATE TABLE") {
			tables = append(tables, sql)
		} else {
			indexes = append(indexes, sql)
		}
	}
	require.Len(t, tables, 1, "the README creates its Prisma-style table in one SQL block")
	require.NotEmpty(t, indexes, "the README has no index blocks")
	return tables[0], indexes
}
