package asynqguard

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/jobguard/jobguard/jobguard"
)

// payloadID reads the row id under key in a JSON object payload: a string
// as it is, or an integer in decimal (for integer id columns; -0 is 0, as
// River's args, which Postgres reads as jsonb, give it to riverguard).
// Anything else is an error wrapping jobguard.ErrInvalidJobID, a permanent
// one: the task can never name a row. The start turns the id into its
// canonical spelling (jobguard.Guard.CanonicalID).
func payloadID(payload []byte, key string) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(payload, &fields); err != nil {
		return "", fmt.Errorf("%w: the payload is not a JSON object (%v)", jobguard.ErrInvalidJobID, err)
	}
	raw, ok := fields[key]
	if !ok {
		return "", fmt.Errorf("%w: the payload has no %q", jobguard.ErrInvalidJobID, key)
	}
	switch {
	case string(raw) == "null":
		return "", fmt.Errorf("%w: the payload's %q is null", jobguard.ErrInvalidJobID, key)
	case raw[0] == '"':
		var id string
		if err := json.Unmarshal(raw, &id); err != nil {
			return "", fmt.Errorf("%w: the payload's %q: %v", jobguard.ErrInvalidJobID, key, err)
		}
		if id == "" {
			return "", fmt.Errorf("%w: the payload's %q is empty", jobguard.ErrInvalidJobID, key)
		}
		return id, nil
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return strconv.FormatInt(n, 10), nil
	}
	shown := string(raw)
	if len(shown) > 40 {
		cut := 40
		for !utf8.RuneStart(shown[cut]) {
			cut--
		}
		shown = shown[:cut] + "…"
	}
	return "", fmt.Errorf("%w: the payload's %q is %s, not a string or an integer", jobguard.ErrInvalidJobID, key, shown)
}
