package safe_test

import (
	"context"
	"testing"

	"github.com/jobguard/jobguard/internal/safe"
)

// BenchmarkCall is the cost of running handed code through Call (a
// goroutine and a channel) beside calling it directly: it sits next to a
// database round trip at every site, a hundred times slower.
func BenchmarkCall(b *testing.B) {
	b.Run("op=direct", func(b *testing.B) {
		f := func() error { return nil }
		for b.Loop() {
			_ = f()
		}
	})
	b.Run("op=call", func(b *testing.B) {
		for b.Loop() {
			_ = safe.Call(func() error { return nil })
		}
	})
	b.Run("op=bounded", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			_ = safe.Bounded(ctx, safe.Grace, func(context.Context) error { return nil })
		}
	})
}
