package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progressEvery is the least pause between two updates of a progress line.
const progressEvery = 200 * time.Millisecond

// progress is the one line a long scan keeps up to date on a terminal:
// what it is doing and how many jobs it has read. Off a terminal (piped,
// redirected, --json) it writes nothing. Its zero value, and a nil one,
// write nothing.
type progress struct {
	mu    sync.Mutex
	w     io.Writer // nil: off
	what  string
	n     int
	shown time.Time
	drawn bool
}

// newProgress returns the progress line of c, on stderr, when stdout and
// stderr are terminals and the output is not JSON.
func (c *cli) newProgress(s *settings, what string) *progress {
	if !c.terminal || s.JSON {
		return &progress{}
	}
	p := &progress{w: c.stderr, what: what}
	p.draw(true)
	return p
}

// add counts n more jobs read.
func (p *progress) add(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	p.draw(false)
}

// draw writes the line, unless it was written less than progressEvery ago.
func (p *progress) draw(force bool) {
	if p.w == nil || (!force && time.Since(p.shown) < progressEvery) {
		return
	}
	p.shown = time.Now()
	p.drawn = true
	fmt.Fprintf(p.w, "\r\033[K%s: %d jobs read…", p.what, p.n)
	flush(p.w)
}

// done clears the line, so that the result prints on a clean one.
func (p *progress) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		flush(p.w)
	}
	p.w = nil
}
