package queueguard_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/queueguard"
	"github.com/jobguard/jobguard/jobguard"
)

// TestRowID_HugeExponentNamesNoRow: a number whose exponent is near
// int64's bounds is far past int64 (or has a fraction): RowID refuses it
// with a *NoRowError, as it does 1e19 and 1e400.
func TestRowID_HugeExponentNamesNoRow(t *testing.T) {
	t.Parallel()
	for _, num := range []string{"1e9223372036854775807", "15e9223372036854775806", "1.5e-9223372036854775808"} {
		var id string
		var err error
		require.NotPanics(t, func() { id, err = queueguard.RowID([]byte(`{"job_id":`+num+`}`), "job_id") }, num)
		var nr *queueguard.NoRowError
		require.ErrorAs(t, err, &nr, "%s named row %q", num, id)
		require.ErrorIs(t, err, jobguard.ErrInvalidJobID, num)
	}
}
