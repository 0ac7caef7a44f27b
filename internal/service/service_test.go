package service_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/service"
)

func TestHandler_NamesTheSettingItCannotRead(t *testing.T) {
	t.Parallel()
	_, err := service.Handler(io.Discard, "text", "loud")
	require.EqualError(t, err, `log-level "loud": want debug, info, warn or error`)
	_, err = service.Handler(io.Discard, "xml", "info")
	require.EqualError(t, err, `log-format "xml": want text or json`)
	h, err := service.Handler(io.Discard, "json", "warn")
	require.NoError(t, err)
	require.False(t, h.Enabled(context.Background(), slog.LevelInfo))
}

func TestService_ServesMetricsUntilStopped(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	svc, err := service.Start("test", slog.New(slog.NewTextHandler(&logs, nil)), "127.0.0.1:0")
	require.NoError(t, err)
	require.NotNil(t, svc.MeterProvider())
	m := regexp.MustCompile(`msg="test: serving metrics" url=(\S+)`).FindStringSubmatch(logs.String())
	require.NotNil(t, m, logs.String())
	resp, err := http.Get(m[1])
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	ran := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	svc.Run(ctx, nil, func(ctx context.Context) error { <-ctx.Done(); close(ran); return nil })
	<-ran
	require.Contains(t, logs.String(), `msg="test: stopped"`)

	svc.Stop(ctx)
	_, err = http.Get(m[1])
	require.Error(t, err, "the server is stopped")
}

func TestService_WithoutAnAddressServesNothing(t *testing.T) {
	t.Parallel()
	svc, err := service.Start("test", slog.New(slog.DiscardHandler), "")
	require.NoError(t, err)
	require.Nil(t, svc.MeterProvider())
	svc.Stop(context.Background())
}
