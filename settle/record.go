package settle

import (
	"encoding/json"
	"fmt"

	"github.com/jobguard/jobguard/internal/pgvalue"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

// Update is one metadata update of a finalize: the name of its handler and
// the arguments the handler gets, in Finalize's process and in the sweep's.
type Update struct {
	// Name selects the handler in Config.Handlers. Names are unique within
	// a finalize.
	Name string
	// Args are stored in the record as JSON (encoding/json) and passed to
	// the handler as it was stored. Keep them to what the handler needs to
	// find and write its rows (ids, a path, a duration), not the rows
	// themselves. Defaults to nil: JSON null, as is an empty
	// json.RawMessage.
	//
	// The record's column is jsonb, which cannot store U+0000 (in a string
	// or a key: encoding/json writes it as the escape \u0000), the escape
	// of half a surrogate pair, bytes that are not UTF-8 (both only in a
	// json.RawMessage), or a number beyond the range of PostgreSQL's
	// numeric (1e131072, 1e-16384). Finalize refuses Args holding one
	// before anything runs, with an error wrapping jobguard.ErrUnstorable
	// that names the field (Updates[i]); jobguard.IsPermanent reports it.
	Args any
}

// record is what a finalize writes: its updates and its usage as they are
// stored, and the names still pending.
type record struct {
	exec    jobguard.Execution
	updates []storedUpdate
	pending []string
	usage   []usage.Entry
	// usageJSON is the usage column, as the finalize wrote it or the
	// sweep read it.
	usageJSON string
}

// storedUpdate is an Update as the record stores it.
type storedUpdate struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// storedEntry is a usage.Entry as the record stores it. The field names
// are the record's format, independent of usage's Go names.
type storedEntry struct {
	Account    string          `json:"account"`
	Meter      string          `json:"meter"`
	Quantity   int64           `json:"quantity"`
	Attributes json.RawMessage `json:"attributes,omitempty"`
}

// columns are a new record's updates and usage as the columns store them.
// They travel as text: in the simple protocol a []byte would be sent as
// bytea.
type columns struct {
	updates, usage string
}

// newRecord validates spec against the registered handlers and increments,
// and against what the record's columns can store, and encodes it. Nothing
// is sent anywhere. The updates' names are jobguard's to judge, with the
// rest of the finalize (jobguard.FinalizeSpec.Validate), and the usage
// entries usage's (usage.Entry.Validate).
func (s *Settler) newRecord(exec jobguard.Execution, spec Spec) (record, columns, error) {
	updates, err := s.storeUpdates(spec.Updates)
	if err != nil {
		return record{}, columns{}, err
	}
	entries, err := s.storeUsage(spec.Usage)
	if err != nil {
		return record{}, columns{}, err
	}
	rec := record{exec: exec, updates: updates, usage: spec.Usage}
	for _, u := range updates {
		rec.pending = append(rec.pending, u.Name)
	}
	cols := columns{updates: "[]"}
	if updates != nil {
		u, err := json.Marshal(updates)
		if err != nil {
			return record{}, columns{}, fmt.Errorf("Updates: %w", err)
		}
		cols.updates = string(u)
	}
	e, err := json.Marshal(entries)
	if err != nil {
		return record{}, columns{}, fmt.Errorf("Usage: %w", err)
	}
	cols.usage = string(e)
	rec.usageJSON = cols.usage
	return rec, cols, nil
}

// storeUpdates returns updates as the record stores them, refusing a name
// that has no handler (an empty one is jobguard's to refuse) and Args the
// column cannot store.
func (s *Settler) storeUpdates(updates []Update) ([]storedUpdate, error) {
	var out []storedUpdate
	for i, u := range updates {
		if u.Name != "" && s.cfg.Handlers[u.Name] == nil {
			return nil, fmt.Errorf("Updates[%d]: %w for update %q (Config.Handlers)", i, ErrUnregistered, u.Name)
		}
		args, err := storedArgs(u.Args)
		if err != nil {
			return nil, fmt.Errorf("Updates[%d] (%s): Args: %w", i, u.Name, err)
		}
		out = append(out, storedUpdate{Name: u.Name, Args: args})
	}
	return out, nil
}

// storedArgs returns an update's Args as JSON the column can store; no
// bytes are no arguments, as nil is.
func storedArgs(args any) (json.RawMessage, error) {
	if raw, ok := args.(json.RawMessage); ok && len(raw) == 0 {
		args = nil
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	if err := pgvalue.CheckJSONB(b); err != nil {
		return nil, fmt.Errorf("%w: %w", jobguard.ErrUnstorable, err)
	}
	return b, nil
}

// storeUsage returns entries as the record stores them: each valid as
// usage judges an entry, its meter registered, and billed once.
func (s *Settler) storeUsage(entries []usage.Entry) ([]storedEntry, error) {
	meters := make(map[string]bool, len(entries))
	stored := make([]storedEntry, len(entries))
	for i, e := range entries {
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("Usage[%d]: %w", i, err)
		}
		switch {
		case !s.billable(e.Meter):
			return nil, fmt.Errorf("Usage[%d]: %w for meter %q (Config.Increments, or a counter of Config.Ledger)", i, ErrUnregistered, e.Meter)
		case meters[e.Meter]:
			return nil, fmt.Errorf("Usage[%d]: Meter %q is billed twice; the ledger keeps one row per (job, meter)", i, e.Meter)
		}
		meters[e.Meter] = true
		attrs, err := e.AttributesJSON()
		if err != nil {
			return nil, fmt.Errorf("Usage[%d]: %w", i, err)
		}
		stored[i] = storedEntry{Account: e.Account, Meter: e.Meter, Quantity: e.Quantity, Attributes: attrs}
	}
	return stored, nil
}

// decodeUpdates reads the updates column. The arguments stay raw JSON, as
// jsonb printed them.
func decodeUpdates(raw string) ([]storedUpdate, error) {
	var out []storedUpdate
	if err := pgvalue.UnmarshalJSON(raw, &out); err != nil {
		return nil, fmt.Errorf("updates: %w", err)
	}
	return out, nil
}

// decodeUsage reads the usage column. A number in the attributes is a
// json.Number, so that it is billed into the ledger, and handed to the
// increment, with the digits it was given.
func decodeUsage(raw string) ([]usage.Entry, error) {
	var stored []storedEntry
	if err := pgvalue.UnmarshalJSON(raw, &stored); err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	out := make([]usage.Entry, len(stored))
	for i, e := range stored {
		out[i] = usage.Entry{Account: e.Account, Meter: e.Meter, Quantity: e.Quantity}
		if len(e.Attributes) > 0 {
			if err := pgvalue.UnmarshalJSON(string(e.Attributes), &out[i].Attributes); err != nil {
				return nil, fmt.Errorf("usage: %s: attributes: %w", e.Meter, err)
			}
		}
	}
	return out, nil
}
