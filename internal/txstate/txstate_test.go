package txstate_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/internal/txstate"
)

func TestOf_EveryHandleShape(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	c, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()

	require.Equal(t, txstate.Own, txstate.Of(env.Pool))
	require.Equal(t, txstate.Own, txstate.Of(c))
	require.Equal(t, txstate.Own, txstate.Of(c.Conn()))
	require.Equal(t, txstate.Own, txstate.Of((*pgx.Conn)(nil)))
	require.Equal(t, txstate.Own, txstate.Of((*pgxpool.Conn)(nil)))

	tx, err := c.Begin(ctx)
	require.NoError(t, err)
	require.Equal(t, txstate.Savepoint, txstate.Of(tx))
	require.Equal(t, txstate.Open, txstate.Of(c), "the connection under a pgx.Tx, passed instead of it")
	require.Equal(t, txstate.Open, txstate.Of(c.Conn()))
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	require.Equal(t, txstate.Savepoint, txstate.Of(sp))
	require.NoError(t, sp.Rollback(ctx))
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, txstate.Own, txstate.Of(c.Conn()), "rolled back: the connection is free again")

	_, err = c.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	require.Equal(t, txstate.Open, txstate.Of(c.Conn()), "a plain BEGIN")
	_, err = c.Exec(ctx, `SELECT 1/0`)
	require.Error(t, err)
	require.Equal(t, txstate.Open, txstate.Of(c.Conn()), "a failed transaction is still open")
	_, err = c.Exec(ctx, `ROLLBACK`)
	require.NoError(t, err)
	require.Equal(t, txstate.Own, txstate.Of(c.Conn()))
}

// BenchmarkOf is what the check adds to every Finalize, CompleteTx and
// Accrue: a type switch and a field read, no round trip.
func BenchmarkOf(b *testing.B) {
	env := testenv.New(b)
	c, err := env.Pool.Acquire(context.Background())
	require.NoError(b, err)
	defer c.Release()
	for _, h := range []struct {
		name string
		db   any
	}{{"pool", env.Pool}, {"conn", c.Conn()}} {
		b.Run(h.name, func(b *testing.B) {
			for b.Loop() {
				if txstate.Of(h.db) != txstate.Own {
					b.Fatal("not Own")
				}
			}
		})
	}
}

func TestBroken_ATransactionWithRowsLeftOpen(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.False(t, txstate.Broken(tx))
	rows, err := tx.Query(ctx, `SELECT generate_series(1, 10)`)
	require.NoError(t, err)
	require.True(t, txstate.Broken(tx), "busy with rows no one reads")
	sp, err := tx.Begin(ctx)
	require.Error(t, err, "not even a savepoint")
	require.Nil(t, sp)
	rows.Close()
	require.False(t, txstate.Broken(tx), "the rows closed, the transaction works again")
	require.NoError(t, tx.Rollback(ctx))
}
