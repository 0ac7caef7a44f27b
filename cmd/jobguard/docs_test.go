package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// prismaConfig is the config file docs/operator.md gives for a Prisma-style
// table, word for word.
func prismaConfig(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operator.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)For a Prisma-style table:\n\n```json\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/operator.md has no Prisma-style config")
	return writeConfig(t, string(m[1]))
}

// The operator's guide's Prisma config works as written on a Prisma table,
// with or without a progress column: a dry run over it lists the stuck job
// and would reclaim it. A progress column the config leaves out is named
// in a warning, with the field that maps it.
func TestOperatorDocs_PrismaConfigWorksOnAPrismaTable(t *testing.T) {
	t.Parallel()
	for name, dropProgress := range map[string]bool{"without progress": true, "with progress": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, fixture.Prisma)
			if dropProgress {
				b.env.Exec(`ALTER TABLE "CourseJob" DROP COLUMN "progress"`)
			}
			b.env.Exec(`CREATE TABLE "Course" ("id" text PRIMARY KEY, "status" text NOT NULL)`)
			stuck := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})

			r := jgEnv(t, []string{"JOBGUARD_DATABASE_URL=" + b.env.DatabaseURL, "JOBGUARD_REDIS_URL=" + b.env.RedisURL},
				"sweep", "--dry-run", "--config", prismaConfig(t))
			require.Equal(t, 0, r.code, r)
			require.Regexp(t, `(?m)^`+stuck+` +chapter +2h0m\d+s +30m0s +2h0m\d+s +reclaim `, r.stdout)
			if dropProgress {
				require.NotContains(t, r.stderr, "ProgressColumn", r)
			} else {
				require.Contains(t, r.stderr, `set Table.ProgressColumn to \"progress\"`, r)
			}
		})
	}
}
