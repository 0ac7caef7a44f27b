package txbatch_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/internal/txbatch"
	"github.com/jobguard/jobguard/internal/txstate"
)

// trips counts what a connection sends: each query and each batch is one
// round trip.
type trips struct{ n atomic.Int64 }

func (c *trips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *trips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *trips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *trips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *trips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

type bundle struct {
	env   *testenv.Env
	pool  *pgxpool.Pool // one connection, traced
	trips *trips
}

func setup(t *testing.T, simple bool) bundle {
	t.Helper()
	env := testenv.New(t)
	env.Exec(`CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(t, err)
	cfg.MaxConns = 1
	tr := &trips{}
	cfg.ConnConfig.Tracer = tr
	if simple {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return bundle{env, pool, tr}
}

func (b bundle) count(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM t`).Scan(&n))
	return n
}

// handles are the shapes BeginExec is given: a pool, a pool's connection,
// a bare connection (each outside any transaction) and a pgx.Tx.
func handles(t *testing.T, b bundle) map[string]func() (txbatch.DB, func()) {
	ctx := context.Background()
	return map[string]func() (txbatch.DB, func()){
		"pool": func() (txbatch.DB, func()) { return b.pool, func() {} },
		"pool-conn": func() (txbatch.DB, func()) {
			c, err := b.pool.Acquire(ctx)
			require.NoError(t, err)
			return c, c.Release
		},
		"conn": func() (txbatch.DB, func()) {
			c, err := b.pool.Acquire(ctx)
			require.NoError(t, err)
			return c.Conn(), c.Release
		},
		"tx": func() (txbatch.DB, func()) {
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			return tx, func() { require.NoError(t, tx.Commit(ctx)) }
		},
	}
}

func TestBeginExec_BeginsAndRunsTheFirstStatementInOneRoundTrip(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		b := setup(t, simple)
		ctx := context.Background()
		// The first use of a statement describes it: warm that up.
		tx, _, err := txbatch.BeginExec(ctx, b.pool, `INSERT INTO t VALUES ($1, 1)`, -1)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))

		before := b.trips.n.Load()
		tx, tag, err := txbatch.BeginExec(ctx, b.pool, `INSERT INTO t VALUES ($1, 1)`, 1)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) }) // a no-op after Commit; frees the pool's one connection
		require.Equal(t, int64(1), tag.RowsAffected())
		require.Equal(t, int64(1), b.trips.n.Load()-before, "BEGIN and the statement: one round trip (simple protocol %v)", simple)
		require.Equal(t, 0, b.count(t), "not committed yet: the statement is inside the transaction")
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 1, b.count(t))
	}
}

func TestBeginExec_EveryHandleGetsATransactionOfItsOwnOrASavepoint(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ctx := context.Background()
	id := 0
	for name, handle := range handles(t, b) {
		db, done := handle()
		id++
		tx, _, err := txbatch.BeginExec(ctx, db, `INSERT INTO t VALUES ($1, 1)`, id)
		require.NoError(t, err, name)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		require.Equal(t, txstate.Savepoint, txstate.Of(tx), name)
		require.NoError(t, tx.Rollback(ctx), name)
		done()
		require.Equal(t, 0, b.count(t), "%s: rolled back", name)
	}
}

// A statement that fails leaves nothing open: the connection is free (a
// pool's is returned), and a caller's transaction goes on past the
// savepoint.
func TestBeginExec_AFailedStatementLeavesNothingOpen(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ctx := context.Background()
	for name, handle := range handles(t, b) {
		db, done := handle()
		tx, _, err := txbatch.BeginExec(ctx, db, `INSERT INTO t VALUES ($1, 1/0)`, 1)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, name)
		require.Equal(t, "22012", pgErr.Code, name)
		require.Nil(t, tx, name)
		var be *txbatch.BeginError
		require.NotErrorAs(t, err, &be, "%s: BEGIN did not fail", name)
		if c, ok := db.(*pgx.Conn); ok {
			require.Equal(t, txstate.Own, txstate.Of(c), "%s: the connection is outside any transaction", name)
		}
		if cur, ok := db.(pgx.Tx); ok {
			_, err := cur.Exec(ctx, `INSERT INTO t VALUES (99, 1)`)
			require.NoError(t, err, "%s: the caller's transaction goes on", name)
		}
		done()
		require.Equal(t, int32(0), b.pool.Stat().AcquiredConns(), "%s: the pool's connection is back", name)
	}
	require.Equal(t, 1, b.count(t), "only the caller's own row")
}

func TestBeginExec_ACancelledContextRunsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tx, _, err := txbatch.BeginExec(ctx, b.pool, `INSERT INTO t VALUES ($1, 1)`, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, tx)
	require.Equal(t, int32(0), b.pool.Stat().AcquiredConns())
	require.Equal(t, 0, b.count(t))
}

// BeginQueryRow hands the statement's row to scan, inside the transaction
// it opened with it; a statement that cannot even be prepared is the
// statement's failure, not BEGIN's, and leaves nothing open.
func TestBeginQueryRow_ReadsTheRowAndNamesAStatementThatFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	var got int
	tx, err := txbatch.BeginQueryRow(ctx, env.Pool, func(r pgx.Row) error { return r.Scan(&got) }, `SELECT 41 + 1`)
	require.NoError(t, err)
	require.Equal(t, 42, got)
	require.NoError(t, tx.Commit(ctx))

	_, err = txbatch.BeginQueryRow(ctx, env.Pool, func(r pgx.Row) error { return r.Scan(&got) }, `SELECT n FROM no_such_table`)
	require.ErrorContains(t, err, "no_such_table")
	var be *txbatch.BeginError
	require.False(t, errors.As(err, &be), "the statement failed, not BEGIN: %v", err)
	require.Eventually(t, func() bool { return env.Pool.Stat().AcquiredConns() == 0 }, testenv.Patience, 10*time.Millisecond,
		"nothing is left open")
}
