package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricsAddrDefault is where run serves /metrics unless --metrics-addr
// says otherwise (9464 is the port of OpenTelemetry's Prometheus exporter).
const metricsAddrDefault = "127.0.0.1:9464"

// metricsServer is the service's meter provider and the HTTP server that
// exposes what it records, in Prometheus' text format, at /metrics.
type metricsServer struct {
	// provider is given to the guard, the reclaimer and the compensation.
	provider *sdkmetric.MeterProvider
	// addr is the address it listens on (the port chosen, for :0).
	addr string

	srv  *http.Server
	done chan error
}

// serveMetrics listens on addr and serves /metrics until shutdown. The
// registry is the service's own: jobguard's instruments and the
// exporter's target info, not the process-wide collectors.
//
// What the HTTP server itself logs (a failed connection, a handler's
// panic) goes to log, at error.
func serveMetrics(addr string, log *slog.Logger) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, fail(exitError, fmt.Errorf("--metrics-addr: %w", err),
			"choose a free address with --metrics-addr, or turn the endpoint off with --metrics-addr ''")
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metricsServer{provider: mp, addr: ln.Addr().String(), done: make(chan error, 1),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}}
	go func() { m.done <- m.srv.Serve(ln) }()
	return m, nil
}

// shutdown stops serving, waiting for scrapes in flight, and shuts the
// meter provider down.
func (m *metricsServer) shutdown(ctx context.Context) error {
	err := m.srv.Shutdown(ctx)
	if serr := <-m.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, m.provider.Shutdown(ctx))
}
