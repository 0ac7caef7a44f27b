package jobguard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
)

func sqlf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
func quote(name string) string               { return ident.Quote(name) }

// openConnTx takes a connection of its own from pool and opens a
// transaction on it with a plain BEGIN, as code that runs its own
// transaction statements leaves a connection. The cleanup rolls it back
// and returns the connection.
func openConnTx(t *testing.T, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	ctx := context.Background()
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), `ROLLBACK`)
		c.Release()
	})
	_, err = c.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	return c
}
