package heartbeat

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
)

// ErrNoEvidence is returned, wrapped, by Beat when its Evidence shows no
// progress: the zero Evidence, Output of zero units, Poll with an empty
// status, or a progress percent outside 0..100. Nothing is written and the
// job's slot is not consumed.
var ErrNoEvidence = errors.New("heartbeat: no evidence of progress")

// Kind says what an Evidence is.
type Kind uint8

// The kinds of evidence. The zero Kind is no evidence at all.
const (
	// KindProgress: the work saved a progress value.
	KindProgress Kind = iota + 1
	// KindOutput: the work produced output (bytes encoded, rows generated).
	KindOutput
	// KindPoll: an external job (a model call, a transcoder) answered a
	// status poll.
	KindPoll
)

// String returns the kind's name: "progress", "output", "poll" or "none".
func (k Kind) String() string {
	switch k {
	case KindProgress:
		return "progress"
	case KindOutput:
		return "output"
	case KindPoll:
		return "poll"
	default:
		return "none"
	}
}

// Evidence is what a beat offers as proof that the work advanced. Build it
// with Progress, Output or Poll; the zero Evidence is refused.
type Evidence struct {
	kind   Kind
	n      int64
	status string
}

// Progress is evidence that the work saved percent (0..100). On a table with
// a progress column, a beat that writes stores percent there too.
func Progress(percent int) Evidence { return Evidence{kind: KindProgress, n: int64(percent)} }

// Output is evidence that the work produced units (bytes, frames, rows) since
// the caller last looked. It must be positive: producing nothing is not
// progress.
func Output(units int64) Evidence { return Evidence{kind: KindOutput, n: units} }

// Poll is evidence that an external job answered a status poll with status
// (for example "running"). The status must not be empty: a poll that got no
// answer is not evidence that anything is alive.
func Poll(status string) Evidence { return Evidence{kind: KindPoll, status: status} }

// Kind returns what e is.
func (e Evidence) Kind() Kind { return e.kind }

// String describes e for people, for example `progress 42%`.
func (e Evidence) String() string {
	switch e.kind {
	case KindProgress:
		return "progress " + strconv.FormatInt(e.n, 10) + "%"
	case KindOutput:
		return "output " + strconv.FormatInt(e.n, 10) + " units"
	case KindPoll:
		return "poll " + strconv.Quote(e.status)
	default:
		return "no evidence"
	}
}

// LogValue renders e as a group of snake_case attributes.
func (e Evidence) LogValue() slog.Value {
	switch e.kind {
	case KindProgress:
		return slog.GroupValue(slog.String("kind", e.kind.String()), slog.Int64("percent", e.n))
	case KindOutput:
		return slog.GroupValue(slog.String("kind", e.kind.String()), slog.Int64("units", e.n))
	case KindPoll:
		return slog.GroupValue(slog.String("kind", e.kind.String()), slog.String("status", e.status))
	default:
		return slog.GroupValue(slog.String("kind", e.kind.String()))
	}
}

// validate refuses evidence that shows no progress. It allocates only when
// it refuses.
func (e Evidence) validate() error {
	switch e.kind {
	case KindProgress:
		if e.n < 0 || e.n > 100 {
			return fmt.Errorf("%w: progress %d%% is outside 0..100", ErrNoEvidence, e.n)
		}
	case KindOutput:
		if e.n <= 0 {
			return fmt.Errorf("%w: output of %d units", ErrNoEvidence, e.n)
		}
	case KindPoll:
		if e.status == "" {
			return fmt.Errorf("%w: poll with an empty status", ErrNoEvidence)
		}
	default:
		return ErrNoEvidence
	}
	return nil
}
