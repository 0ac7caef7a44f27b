package service

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

// MetricsAddrDefault is where a service serves /metrics unless told
// otherwise (9464 is the port of OpenTelemetry's Prometheus exporter).
const MetricsAddrDefault = "127.0.0.1:9464"

// Metrics is a service's meter provider and the HTTP server that exposes
// what it records, in Prometheus' text format, at /metrics.
type Metrics struct {
	// Provider is given to the guards, the reclaimer and the other sweeps.
	Provider *sdkmetric.MeterProvider
	// Addr is the address it listens on (the port chosen, for :0).
	Addr string

	srv  *http.Server
	done chan error
}

// ServeMetrics listens on addr and serves /metrics until Shutdown. The
// registry is the service's own: jobguard's instruments and the
// exporter's target info, not the process-wide collectors.
//
// What the HTTP server itself logs (a failed connection, a handler's
// panic) goes to log, at error.
func ServeMetrics(addr string, log *slog.Logger) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &Metrics{Provider: mp, Addr: ln.Addr().String(), done: make(chan error, 1),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}}
	go func() { m.done <- m.srv.Serve(ln) }()
	return m, nil
}

// Shutdown stops serving, waiting for scrapes in flight, and shuts the
// meter provider down.
func (m *Metrics) Shutdown(ctx context.Context) error {
	err := m.srv.Shutdown(ctx)
	if serr := <-m.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, m.Provider.Shutdown(ctx))
}
