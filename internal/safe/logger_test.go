package safe_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/testkit/panicky"
)

func TestLogger_APanickingHandlerDropsItsRecordsAndNothingElse(t *testing.T) {
	t.Parallel()
	var sw panicky.Switch
	sw.Arm()
	l := safe.Logger(sw.Logger())
	require.NotPanics(t, func() {
		l.Info("lost", slog.String("k", "v"))
		l.With("a", 1).WithGroup("g").Warn("lost too")
		l.LogAttrs(context.Background(), slog.LevelError, "and this")
	})
	require.Same(t, l, safe.Logger(l), "wrapped once")
}

func TestLogger_AWorkingHandlerGetsEveryRecord(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := safe.Logger(slog.New(slog.NewTextHandler(&buf, nil)))
	l.With("job_id", "j1").WithGroup("g").Info("reclaimed", slog.Int("n", 2))
	require.Contains(t, buf.String(), `msg=reclaimed job_id=j1 g.n=2`)
	require.NotNil(t, safe.Logger(nil))
}
