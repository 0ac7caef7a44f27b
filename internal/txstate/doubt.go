package txstate

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// InDoubt reports whether err leaves the outcome of the write that
// returned it unknown: its statement or its COMMIT may have been sent, and
// no answer came (the connection failed, or the context ended and the
// connection was given up), so it may have committed. A server's error
// answers (nothing committed), and an error that pgx marks safe to retry
// came before anything was sent. Any other error may be in doubt, so a
// caller that reads back what it wrote on InDoubt spends a read, at
// worst, on an error that was not.
func InDoubt(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && !errors.As(err, &pgErr) && !pgconn.SafeToRetry(err)
}
