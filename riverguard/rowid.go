package riverguard

import (
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/internal/queueguard"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim/riversource"
)

// NoRowError is the refusal of a River job whose args do not name a row of
// the jobs table: the key is missing, null, empty, or not a string or an
// integer. The rule is riversource's, so that the middleware starts the row
// the reclaimer watches. It wraps riversource.ErrNoRowID and
// jobguard.ErrInvalidJobID, so jobguard.IsPermanent reports true: the same
// args can never name a row, and River cancels the job instead of retrying
// it.
type NoRowError struct {
	// RiverJobID is the River job's id.
	RiverJobID int64
	// Key is the args key read (Config.RowIDKey).
	Key string
	// Found says what the key held instead of a row id.
	Found string
}

// Error names the River job, the key and what it held.
func (e *NoRowError) Error() string {
	return fmt.Sprintf("riverguard: river job %d: args do not name a row: %s", e.RiverJobID, e.Found)
}

// Unwrap returns riversource.ErrNoRowID and jobguard.ErrInvalidJobID.
func (e *NoRowError) Unwrap() []error {
	return []error{riversource.ErrNoRowID, jobguard.ErrInvalidJobID}
}

// rowID reads the id of the job's row from River's encoded args by
// queueguard.RowID, the one rule of both queue adapters: the value of the
// top-level key as jsonb reads it, which is how riversource reads the same
// args in the database, a string (not empty) or an integer in int64. A
// failure is a *NoRowError without its RiverJobID.
func rowID(args []byte, key string) (string, error) {
	id, err := queueguard.RowID(args, key)
	var nr *queueguard.NoRowError
	if errors.As(err, &nr) {
		return "", &NoRowError{Key: key, Found: nr.Found}
	}
	return id, err
}
