// Package sim stands in for the slow external work of the examples: a model
// call that writes a course's weeks, an encoder that renders a video, an
// exporter. Each can be slow (Latency) or hang at a known point (Gate) until
// the caller releases it, which is how the demo makes a call outlive its
// job's runtime limit without racing the clock.
package sim

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Gate holds a simulated call at one point until it is released. The zero
// Gate is not usable; build one with NewGate or HangFor.
type Gate struct {
	reached, released chan struct{}
	reachOnce, once   sync.Once
	// after, when positive, releases the gate that long after a call
	// reaches it.
	after time.Duration
}

// NewGate returns a closed door: a call that reaches it waits for Release.
func NewGate() *Gate {
	return &Gate{reached: make(chan struct{}), released: make(chan struct{})}
}

// HangFor returns a gate that lets a call through d after it reaches the
// gate, or earlier on Release.
func HangFor(d time.Duration) *Gate {
	g := NewGate()
	g.after = d
	return g
}

// Reached is closed once a call waits at the gate.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Release lets every waiting and future call through. Safe to call twice.
func (g *Gate) Release() { g.once.Do(func() { close(g.released) }) }

// wait marks the gate reached and blocks until it is released or ctx ends.
// A nil gate does not hold.
func (g *Gate) wait(ctx context.Context) error {
	if g == nil {
		return nil
	}
	g.reachOnce.Do(func() { close(g.reached) })
	var timeout <-chan time.Time
	if g.after > 0 {
		t := time.NewTimer(g.after)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-g.released:
		return nil
	case <-timeout:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Call is one opaque external call: it takes Latency, and first hangs at
// Hang when one is set. It gives no sign of life while it runs, which is
// exactly why a caller cannot heartbeat through it.
type Call struct {
	// Latency is how long the call takes once it is not held. Defaults to 0.
	Latency time.Duration
	// Hang holds the call before it does its work. Defaults to nil: no hang.
	Hang *Gate
}

// Do runs the call.
func (c Call) Do(ctx context.Context) error {
	if err := c.Hang.wait(ctx); err != nil {
		return err
	}
	return sleep(ctx, c.Latency)
}

// Week is one generated week of a course.
type Week struct {
	Title   string
	Lessons []Lesson
}

// Lesson is one lesson of a week, with its lectures.
type Lesson struct {
	Title    string
	Lectures []Lecture
}

// Lecture is one lecture's title and text.
type Lecture struct {
	Title string
	Body  string
}

// Model is the simulated language model that writes a course's weeks.
type Model struct {
	Call
}

// Generate writes weeks weeks of course, numbered from first. Each week has
// two lessons of two lectures.
func (m Model) Generate(ctx context.Context, course string, first, weeks int) ([]Week, error) {
	if err := m.Do(ctx); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	out := make([]Week, weeks)
	for i := range out {
		n := first + i
		w := Week{Title: fmt.Sprintf("%s, week %d", course, n)}
		for l := 1; l <= 2; l++ {
			lesson := Lesson{Title: fmt.Sprintf("Week %d, lesson %d", n, l)}
			for k := 1; k <= 2; k++ {
				lesson.Lectures = append(lesson.Lectures, Lecture{
					Title: fmt.Sprintf("Lecture %d.%d.%d", n, l, k),
					Body:  fmt.Sprintf("Generated text of lecture %d.%d.%d of %s.", n, l, k, course),
				})
			}
			w.Lessons = append(w.Lessons, lesson)
		}
		out[i] = w
	}
	return out, nil
}

// Encoder is the simulated video encoder. It writes Steps chunks, one every
// StepDelay, reporting its progress after each; then it muxes the file,
// which is where Hang holds it.
type Encoder struct {
	// Steps is the number of chunks. Defaults to 10.
	Steps int
	// StepDelay is the time one chunk takes. Defaults to 0.
	StepDelay time.Duration
	// Seconds is the length of the video produced. Defaults to 60.
	Seconds int
	// Hang holds the final mux, after the last progress report. Defaults to
	// nil: no hang.
	Hang *Gate
}

// Encoded describes a finished encode.
type Encoded struct {
	Seconds int
	Bytes   int64
}

// Encode writes the video to w. progress is called after each chunk with
// the percent done; an error from it stops the encode (the worker learned
// that it lost the job).
func (e Encoder) Encode(ctx context.Context, w io.Writer, progress func(percent int) error) (Encoded, error) {
	steps, seconds := e.Steps, e.Seconds
	if steps <= 0 {
		steps = 10
	}
	if seconds <= 0 {
		seconds = 60
	}
	var out Encoded
	chunk := strings.Repeat("frame ", 64) + "\n"
	for i := 1; i <= steps; i++ {
		if err := sleep(ctx, e.StepDelay); err != nil {
			return out, fmt.Errorf("encoder: %w", err)
		}
		n, err := io.WriteString(w, chunk)
		out.Bytes += int64(n)
		if err != nil {
			return out, fmt.Errorf("encoder: %w", err)
		}
		// The last chunk reports 99%: 100 is the completion's to write.
		if err := progress(i * 99 / steps); err != nil {
			return out, err
		}
	}
	if err := e.Hang.wait(ctx); err != nil {
		return out, fmt.Errorf("encoder: mux: %w", err)
	}
	out.Seconds = seconds
	return out, nil
}
