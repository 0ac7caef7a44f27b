package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// On a terminal a progress line counts the jobs read and is cleared when
// done; piped, or with --json, nothing is written.
func TestProgress_OnlyOnATerminal(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := defaultSettings()
	p := (&cli{stderr: &out, terminal: true}).newProgress(&s, "planning")
	p.add(10_000)
	p.done()
	require.Equal(t, "\r\033[Kplanning: 0 jobs read…\r\033[K", out.String(), "drawn at once, throttled after, cleared")

	for _, c := range []struct {
		terminal, json bool
	}{{false, false}, {true, true}} {
		out.Reset()
		s.JSON = c.json
		p := (&cli{stderr: &out, terminal: c.terminal}).newProgress(&s, "planning")
		p.add(1)
		p.done()
		require.Empty(t, out.String(), "terminal %v, json %v", c.terminal, c.json)
	}
}
