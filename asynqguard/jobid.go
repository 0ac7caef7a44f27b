package asynqguard

import (
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/internal/queueguard"
	"github.com/jobguard/jobguard/jobguard"
)

// payloadID reads the row id under key in a JSON object payload by
// queueguard.RowID, the rule riverguard reads River's args by: a string
// as it is, or a number that jsonb prints as an integer in int64, in
// decimal (-0 is 0, 1e3 is 1000). Anything else is an error wrapping
// jobguard.ErrInvalidJobID, a permanent one: the task can never name a
// row. The start turns the id into its canonical spelling
// (jobguard.Guard.CanonicalID).
func payloadID(payload []byte, key string) (string, error) {
	id, err := queueguard.RowID(payload, key)
	var nr *queueguard.NoRowError
	if errors.As(err, &nr) {
		return "", fmt.Errorf("%w: the payload does not name a row: %s", jobguard.ErrInvalidJobID, nr.Found)
	}
	return id, err
}
