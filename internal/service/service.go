package service

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// ShutdownTimeout bounds the metrics server's shutdown after the sweeps
// stopped.
const ShutdownTimeout = 5 * time.Second

// Service is one long-running process: its name in its log lines, its
// logger and, when it serves them, its metrics.
type Service struct {
	name    string
	log     *slog.Logger
	metrics *Metrics // nil: no metrics
}

// Start starts the service called name (the prefix of its log lines, such
// as "jobguard: run"): it serves the metrics at http://<metricsAddr>/metrics,
// or none when metricsAddr is empty, and logs where. The caller stops it,
// whether Run was called or not.
func Start(name string, log *slog.Logger, metricsAddr string) (*Service, error) {
	s := &Service{name: name, log: log}
	if metricsAddr == "" {
		return s, nil
	}
	m, err := ServeMetrics(metricsAddr, log)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	log.Info(name+": serving metrics", slog.String("url", "http://"+m.Addr+"/metrics"))
	return s, nil
}

// MeterProvider is what the service's parts record their metrics on: nil,
// the library's no-op, without metrics.
func (s *Service) MeterProvider() metric.MeterProvider {
	if s.metrics == nil {
		return nil
	}
	return s.metrics.Provider
}

// Run logs that the service started, with attrs, runs every sweep until
// ctx ends, and logs that it stopped once they all have. A sweep's Run
// returns nil when ctx ends; what it logs of its errors it has logged.
func (s *Service) Run(ctx context.Context, attrs []slog.Attr, sweeps ...func(context.Context) error) {
	s.log.LogAttrs(ctx, slog.LevelInfo, s.name+": started", attrs...)
	var wg sync.WaitGroup
	for _, run := range sweeps {
		wg.Go(func() { _ = run(ctx) })
	}
	wg.Wait()
	s.log.Info(s.name + ": stopped")
}

// Stop shuts the metrics server down, waiting at most ShutdownTimeout for
// the scrapes in flight, even after ctx ended.
func (s *Service) Stop(ctx context.Context) {
	if s.metrics == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := s.metrics.Shutdown(ctx); err != nil {
		s.log.Warn(s.name+": metrics server did not stop cleanly", slog.Any("error", err))
	}
}
