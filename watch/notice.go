package watch

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// Notice says that a job's execution was reclaimed: the job's id, as the id
// column prints it, and the generation of the execution that lost the job,
// as the reclaim's conditional write returned it (0 for a table without a
// generation column). It is the execution itself, so that a reclaimer
// publishes what its write returned without knowing this package. The
// publisher adds its guard's jobs table (jobguard.Guard.TableKey) to each
// notice it sends, and a watcher applies only the notices of its own
// guard's table, so the jobs tables of one database may share a channel.
type Notice = jobguard.Execution

// wireNotice is a notice as the transports carry it. Table is the jobs
// table's Guard.TableKey; a notice without one (from a publisher that did
// not send it) cannot be told apart from another table's.
type wireNotice struct {
	JobID      string `json:"job_id"`
	Generation int64  `json:"generation"`
	Table      string `json:"table,omitempty"`
	// Cancelled is true in the notice of an operator's cancel
	// (jobguard.Guard.Cancel writes the same format in SQL).
	Cancelled bool `json:"cancelled,omitempty"`
}

// NoticesFrom returns a notice for every row of states, typically the rows
// that a reclaim's conditional write (jobguard's FailIfUnchanged) really
// changed. Publish them once that write has committed.
func NoticesFrom(states []jobset.Job) []Notice {
	out := make([]Notice, len(states))
	for i, s := range states {
		out[i] = Notice{JobID: s.ID, Generation: s.Generation}
	}
	return out
}

// ErrNoticeTooLarge is returned by Publish for a notice whose encoding alone
// exceeds the transport's payload limit (a job id of thousands of bytes).
// The other notices of the call are still sent.
var ErrNoticeTooLarge = errors.New("watch: notice exceeds the payload limit")

// payloads encodes the notices of the jobs table table as JSON arrays, each
// at most limit bytes, in the order given. A notice that cannot fit in any
// payload is reported in the joined error and left out.
func payloads(table string, notices []Notice, limit int) ([]string, error) {
	return payloadsOf(table, notices, limit, false)
}

// payloadsOf is payloads, with every notice saying whether it is an
// operator's cancel.
func payloadsOf(table string, notices []Notice, limit int, cancelled bool) ([]string, error) {
	var out []string
	var errs []error
	buf := make([]byte, 0, min(limit, 1024))
	flush := func() {
		if len(buf) > 0 {
			out = append(out, string(append(buf, ']')))
			buf = buf[:0]
		}
	}
	for _, n := range notices {
		b, err := json.Marshal(wireNotice{JobID: n.JobID, Generation: n.Generation, Table: table, Cancelled: cancelled})
		if err != nil {
			errs = append(errs, fmt.Errorf("job %s: %w", n.JobID, err))
			continue
		}
		if len(b)+2 > limit {
			errs = append(errs, fmt.Errorf("%w: job %.64q: %d bytes, limit %d", ErrNoticeTooLarge, n.JobID, len(b)+2, limit))
			continue
		}
		// One more element costs its bytes, a comma, and the closing bracket.
		if len(buf) > 0 && len(buf)+1+len(b)+1 > limit {
			flush()
		}
		if len(buf) == 0 {
			buf = append(buf, '[')
		} else {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
	}
	flush()
	return out, errors.Join(errs...)
}

// decode reads a payload written by payloads.
func decode(payload string) ([]wireNotice, error) {
	var ws []wireNotice
	if err := json.Unmarshal([]byte(payload), &ws); err != nil {
		return nil, fmt.Errorf("watch: undecodable notice payload %.64q: %w", payload, err)
	}
	return ws, nil
}
