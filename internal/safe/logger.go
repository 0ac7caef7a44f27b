package safe

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"sync"
)

// Logger returns a logger that hands every record to l's handler, and
// drops a record whose handler panics instead of passing the panic to the
// code that logged: a loop logs after the state changes it reports, and a
// broken logger must not undo them (a marker skipped, a leader kept on a
// dead connection). The first such panic is printed by the standard
// library's log package, so that the broken logger is seen. A nil l is
// slog.Default(). Wrapping a logger Logger returned returns it as it is.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		l = slog.Default()
	}
	if _, ok := l.Handler().(*handler); ok {
		return l
	}
	return slog.New(&handler{next: l.Handler(), once: new(sync.Once)})
}

// handler is a slog.Handler that recovers from its next handler's panics.
type handler struct {
	next slog.Handler
	once *sync.Once // shared by the handlers derived from one another
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) (enabled bool) {
	defer h.recover(nil)
	return h.next.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) (err error) {
	defer h.recover(&err)
	return h.next.Handle(ctx, r)
}

func (h *handler) WithAttrs(attrs []slog.Attr) (derived slog.Handler) {
	derived = h
	defer h.recover(nil)
	return &handler{next: h.next.WithAttrs(attrs), once: h.once}
}

func (h *handler) WithGroup(name string) (derived slog.Handler) {
	derived = h
	defer h.recover(nil)
	return &handler{next: h.next.WithGroup(name), once: h.once}
}

// recover ends a panic of the next handler, returned as err when err is
// given, and says so once.
func (h *handler) recover(err *error) {
	p := recover()
	if p == nil {
		return
	}
	pe := fmt.Errorf("jobguard: the logger panicked; its records are dropped: %w", &PanicError{Value: p})
	if err != nil {
		*err = pe
	}
	h.once.Do(func() {
		// log's output may be the broken handler itself (slog.SetDefault).
		_ = Call(func() error { log.Print(pe); return nil })
	})
}
