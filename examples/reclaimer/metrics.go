package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// MetricsAddrDefault is where the service serves /metrics unless
// -metrics-addr says otherwise (9464 is the port OpenTelemetry uses for its
// Prometheus exporter).
const MetricsAddrDefault = "127.0.0.1:9464"

// metricsServer is the service's meter provider and the HTTP server that
// exposes what it records, in the Prometheus text format, at /metrics.
type metricsServer struct {
	// Provider is given to every guard, the reclaimer and the compensations.
	Provider *sdkmetric.MeterProvider
	// Addr is the address the server listens on (the port chosen, for :0).
	Addr string

	srv  *http.Server
	done chan error
}

// serveMetrics listens on addr and serves /metrics until shutdown. The
// registry is the service's own, so it holds jobguard's instruments and the
// exporter's target info, not the process-wide collectors.
func serveMetrics(addr string) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metricsServer{Provider: mp, Addr: ln.Addr().String(), done: make(chan error, 1),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
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
	return errors.Join(err, m.Provider.Shutdown(ctx))
}
