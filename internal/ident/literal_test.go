package ident_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

func TestLiteral_RoundTripsThroughTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	for _, conforming := range []string{"on", "off"} {
		tx, err := env.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SET LOCAL standard_conforming_strings = "+conforming)
		require.NoError(t, err)
		for _, s := range []string{"PROCESSING", "it's", `back\slash`, `\'`, "'; DROP TABLE x; --", "日本語"} {
			var got string
			require.NoError(t, tx.QueryRow(ctx, "SELECT "+ident.Literal(s)).Scan(&got))
			require.Equal(t, s, got, "standard_conforming_strings = %s", conforming)
		}
		require.NoError(t, tx.Rollback(ctx))
	}
}
