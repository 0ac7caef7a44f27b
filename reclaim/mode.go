package reclaim

import (
	"context"
	"fmt"
	"time"
)

// Mode says how a sweep treats the jobs of one type that it decides to
// reclaim: an operator's switch per type, kept beside the type's limit.
type Mode string

// The modes of a job type.
const (
	// ModeReclaim fails them: the reclaimer's work. A type without a mode
	// is in this one.
	ModeReclaim Mode = "reclaim"
	// ModeShadow decides them and writes nothing: they are counted in
	// Report.WouldReclaim and logged, as a shadow sweep (Config.Shadow)
	// does for every type. For a type whose limit was just set or lowered.
	ModeShadow Mode = "shadow"
	// ModeOff never reclaims them automatically: they are counted in
	// Report.Paused. An operator's pause, while a type's workers are known
	// to be stalled for a reason of their own (an outage of the service
	// they call), and failing their jobs would throw away work.
	ModeOff Mode = "off"
)

// Valid reports whether m is one of the modes.
func (m Mode) Valid() bool { return m == ModeReclaim || m == ModeShadow || m == ModeOff }

// ModeLimits is a Limits that also says each type's Mode, read with the
// limits in one call. A sweep asks it in place of Limits when its
// Config.Limits is one (TableLimits is); a type absent from modes, and
// every type of a Limits that is not a ModeLimits (StaticLimits, a Limits
// of one's own), is in ModeReclaim. An unknown mode fails the sweep, as
// an error of Limits does.
type ModeLimits interface {
	Limits
	LimitsAndModes(ctx context.Context) (limits map[string]time.Duration, modes map[string]Mode, err error)
}

var _ ModeLimits = (*TableLimits)(nil)

// readLimits reads the limits, and the modes of a ModeLimits, and checks
// them.
func readLimits(ctx context.Context, l Limits) (map[string]time.Duration, map[string]Mode, error) {
	var limits map[string]time.Duration
	var modes map[string]Mode
	var err error
	if ml, ok := l.(ModeLimits); ok {
		limits, modes, err = ml.LimitsAndModes(ctx)
	} else {
		limits, err = l.Limits(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	return vetLimits(limits, modes)
}

// vetLimits refuses limits that are not positive and modes that are no
// Mode, whoever read them.
func vetLimits(limits map[string]time.Duration, modes map[string]Mode) (map[string]time.Duration, map[string]Mode, error) {
	if err := checkLimits(limits); err != nil {
		return nil, nil, err
	}
	for typ, m := range modes {
		if !m.Valid() {
			return nil, nil, fmt.Errorf("mode of job type %q is %q: want %q, %q or %q", typ, m, ModeReclaim, ModeShadow, ModeOff)
		}
	}
	return limits, modes, nil
}

// modeOf is the mode of typ in modes.
func modeOf(modes map[string]Mode, typ string) Mode {
	if m, ok := modes[typ]; ok {
		return m
	}
	return ModeReclaim
}
