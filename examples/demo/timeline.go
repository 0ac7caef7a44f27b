package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// timeline prints the demo's story with the time since it began. It is
// shared by the scenes and the log handler, so it serializes the writes.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
	// unexpected counts scene expectations that did not hold.
	unexpected int
}

// at prints one line of the story, stamped with the elapsed time.
func (t *timeline) at(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "[%5.2fs] %s\n", time.Since(t.start).Seconds(), fmt.Sprintf(format, args...))
}

// say prints a line without a time stamp.
func (t *timeline) say(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, format+"\n", args...)
}

// expect prints a check of the story: what should hold at this point.
func (t *timeline) expect(ok bool, format string, args ...any) {
	mark := "ok"
	if !ok {
		mark = "UNEXPECTED"
		t.mu.Lock()
		t.unexpected++
		t.mu.Unlock()
	}
	t.say("          %-10s %s", mark, fmt.Sprintf(format, args...))
}

// heading starts a scene.
func (t *timeline) heading(title string) {
	t.say("\n%s", title)
}
