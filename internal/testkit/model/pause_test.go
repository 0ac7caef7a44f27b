package model

import (
	"errors"

	"pgregory.net/rapid"

	"github.com/jobguard/jobguard/reclaim"
)

// pause sets a type's mode in the limits table, as 'jobguard limits pause'
// and 'resume' do: off (its overdue jobs are counted as paused and never
// reclaimed), shadow (counted as would-reclaim, never written) or reclaim.
// A type without a limit row cannot be paused (reclaim.ErrNoLimit), and
// the model stays as it was. The brake's caps (at least 20 reclaims in one
// sweep) are beyond the few jobs of a sequence: every sweep of the model
// must report none braked (reclaim_test.go), also after a clock action has
// stepped the reclaimer's wall clock, which the brake never reads.
func (m *machine) pause(rt *rapid.T) {
	typ := ""
	if m.w.table.TypeColumn != "" {
		// The types of running jobs first, whose pause a sweep can show.
		types := []string{"chapter", "video", "orphan"}
		for _, j := range m.ref.jobs {
			if j.status == processing {
				types = append(types, j.typ, j.typ)
			}
		}
		typ = rapid.SampledFrom(types).Draw(rt, "type")
	}
	mode := rapid.SampledFrom([]reclaim.Mode{reclaim.ModeOff, reclaim.ModeShadow, reclaim.ModeReclaim}).Draw(rt, "mode")
	m.step(rt, "pause "+string(mode))
	err := m.w.limits.SetMode(m.ctx, typ, mode)
	hasRow := m.ref.limits[typ].set
	switch {
	case !hasRow && errors.Is(err, reclaim.ErrNoLimit):
		return
	case err != nil:
		rt.Fatalf("pause %q %s: %v (limit row in the model: %v)", typ, mode, err, hasRow)
	case !hasRow:
		rt.Fatalf("pause %q %s: set a mode on a type without a limit row", typ, mode)
	}
	if mode == reclaim.ModeReclaim {
		delete(m.ref.modes, typ)
		return
	}
	m.ref.modes[typ] = string(mode)
}
