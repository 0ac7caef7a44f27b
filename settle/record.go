package settle

import (
	"encoding/json"
	"fmt"
	"slices"

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
// is sent anywhere.
func (s *Settler) newRecord(exec jobguard.Execution, spec Spec) (record, columns, error) {
	rec := record{exec: exec, usage: spec.Usage}
	for i, u := range spec.Updates {
		switch {
		case u.Name == "":
			return record{}, columns{}, fmt.Errorf("Updates[%d]: Name is empty", i)
		case s.cfg.Handlers[u.Name] == nil:
			return record{}, columns{}, fmt.Errorf("Updates[%d]: %w for update %q (Config.Handlers)", i, ErrUnregistered, u.Name)
		case slices.Contains(rec.pending, u.Name):
			return record{}, columns{}, fmt.Errorf("Updates[%d]: Name %q is used twice", i, u.Name)
		}
		if raw, ok := u.Args.(json.RawMessage); ok && len(raw) == 0 {
			u.Args = nil // no bytes are no arguments, as nil is
		}
		args, err := json.Marshal(u.Args)
		if err == nil {
			if err = pgvalue.CheckJSONB(args); err != nil {
				err = fmt.Errorf("%w: %w", jobguard.ErrUnstorable, err)
			}
		}
		if err != nil {
			return record{}, columns{}, fmt.Errorf("Updates[%d] (%s): Args: %w", i, u.Name, err)
		}
		rec.updates = append(rec.updates, storedUpdate{Name: u.Name, Args: args})
		rec.pending = append(rec.pending, u.Name)
	}
	meters := make(map[string]bool, len(spec.Usage))
	stored := make([]storedEntry, len(spec.Usage))
	for i, e := range spec.Usage {
		switch {
		case e.Account == "":
			return record{}, columns{}, fmt.Errorf("Usage[%d]: Account is empty", i)
		case e.Meter == "":
			return record{}, columns{}, fmt.Errorf("Usage[%d]: Meter is empty", i)
		case e.Quantity < 0:
			return record{}, columns{}, fmt.Errorf("Usage[%d]: Quantity %d is negative", i, e.Quantity)
		case s.cfg.Increments[e.Meter] == nil:
			return record{}, columns{}, fmt.Errorf("Usage[%d]: %w for meter %q (Config.Increments)", i, ErrUnregistered, e.Meter)
		case meters[e.Meter]:
			return record{}, columns{}, fmt.Errorf("Usage[%d]: Meter %q is billed twice; the ledger keeps one row per (job, meter)", i, e.Meter)
		}
		// The meter is a registered one, which New checked.
		if err := pgvalue.CheckText(e.Account); err != nil {
			return record{}, columns{}, fmt.Errorf("Usage[%d]: Account: %w: %w", i, jobguard.ErrUnstorable, err)
		}
		meters[e.Meter] = true
		stored[i] = storedEntry{Account: e.Account, Meter: e.Meter, Quantity: e.Quantity}
		if len(e.Attributes) == 0 {
			continue // none, however spelled, as usage stores them
		}
		attrs, err := json.Marshal(e.Attributes)
		if err == nil {
			if err = pgvalue.CheckJSONB(attrs); err != nil {
				err = fmt.Errorf("%w: %w", jobguard.ErrUnstorable, err)
			}
		}
		if err != nil {
			return record{}, columns{}, fmt.Errorf("Usage[%d]: Attributes: %w", i, err)
		}
		stored[i].Attributes = attrs
	}
	cols := columns{updates: "[]"}
	if rec.updates != nil {
		u, err := json.Marshal(rec.updates)
		if err != nil {
			return record{}, columns{}, fmt.Errorf("Updates: %w", err)
		}
		cols.updates = string(u)
	}
	e, err := json.Marshal(stored)
	if err != nil {
		return record{}, columns{}, fmt.Errorf("Usage: %w", err)
	}
	cols.usage = string(e)
	return rec, cols, nil
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
