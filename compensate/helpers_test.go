package compensate_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// storage stands in for a file store: the compensator deletes "files" from
// it and counts every call per ref, so a test can see what was compensated
// and how often.
type storage struct {
	mu       sync.Mutex
	calls    map[string]int // compensator calls per ref
	undone   map[string]int // successful undos per ref
	failLeft map[string]int // ref → failures still to return
}

func newStorage() *storage {
	return &storage{calls: map[string]int{}, undone: map[string]int{}, failLeft: map[string]int{}}
}

func (s *storage) compensate(_ context.Context, _ pgx.Tx, a compensate.Artifact) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[a.Ref]++
	if s.failLeft[a.Ref] > 0 {
		s.failLeft[a.Ref]--
		return errors.New("storage unavailable")
	}
	s.undone[a.Ref]++
	return nil
}

func (s *storage) undoneRefs() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.undone {
		out[k] = v
	}
	return out
}

type bundle struct {
	env   *testenv.Env
	jobs  *fixture.Jobs
	files *storage
	arts  *compensate.Artifacts
}

// deleteAsset undoes an asset row through the compensation transaction.
func deleteAsset(ctx context.Context, tx pgx.Tx, a compensate.Artifact) error {
	_, err := tx.Exec(ctx, `DELETE FROM assets WHERE id = $1::bigint`, a.Ref)
	return err
}

func setup(t *testing.T, v ...fixture.Variant) *bundle {
	t.Helper()
	variant := fixture.Default
	if len(v) > 0 {
		variant = v[0]
	}
	env := testenv.New(t, testenv.Config{MaxConns: 16})
	jobs := fixture.Create(t, env, variant)
	env.Exec(compensate.Migration)
	env.Exec(`CREATE TABLE assets (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id text, generation bigint)`)
	b := &bundle{env: env, jobs: jobs, files: newStorage()}
	b.arts = b.newArtifacts(t, env.Pool)
	return b
}

// newArtifacts is another process's view of the same table.
func (b *bundle) newArtifacts(t *testing.T, db *pgxpool.Pool) *compensate.Artifacts {
	t.Helper()
	arts, err := compensate.New(context.Background(), compensate.Config{
		Guard: b.jobs.Guard, DB: db,
		Compensators: map[string]compensate.Func{"file": b.files.compensate, "asset_row": deleteAsset},
	})
	require.NoError(t, err)
	return arts
}

// produce is what an execution does before finalizing: it records and
// creates a file and, in one transaction, an asset row with its record.
// It returns the file's ref and the asset id.
func (b *bundle) produce(t *testing.T, exec jobguard.Execution) (file, asset string) {
	t.Helper()
	ctx := context.Background()
	file = fmt.Sprintf("videos/%s/%d.mp4", exec.JobID, exec.Generation)
	require.NoError(t, b.arts.Record(ctx, b.env.Pool, exec, "file", file))
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO assets (job_id, generation) VALUES ($1, $2) RETURNING id::text`,
		exec.JobID, exec.Generation).Scan(&asset))
	require.NoError(t, b.arts.Record(ctx, tx, exec, "asset_row", asset))
	require.NoError(t, tx.Commit(ctx))
	return file, asset
}

// states returns the state of every artifact of exec, by ref.
func (b *bundle) states(t *testing.T, exec jobguard.Execution) map[string]string {
	t.Helper()
	rows, err := b.env.Pool.Query(context.Background(),
		`SELECT ref, state FROM job_artifacts WHERE job_id = $1 AND generation = $2`, exec.JobID, exec.Generation)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var ref, state string
		require.NoError(t, rows.Scan(&ref, &state))
		out[ref] = state
	}
	require.NoError(t, rows.Err())
	return out
}

func (b *bundle) assetExists(t *testing.T, id string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, b.env.Pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM assets WHERE id = $1::bigint)`, id).Scan(&ok))
	return ok
}

// restart moves the job to a new generation behind the old execution's back,
// as another path that restarts a reclaimed job would.
func (b *bundle) restart(t *testing.T, id string, generation int64) {
	t.Helper()
	tb := b.jobs.Table
	b.env.Exec(fmt.Sprintf(`UPDATE %s SET %s = $2, %s = $3, %s = NULL WHERE %s::text = $1`,
		tb.QualifiedName(), quote(tb.StatusColumn), quote(tb.GenerationColumn), quote(tb.FailureReasonColumn), quote(tb.IDColumn)),
		id, tb.Statuses.Processing, generation)
}

func quote(name string) string { return ident.Quote(name) }
