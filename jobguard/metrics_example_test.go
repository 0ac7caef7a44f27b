package jobguard_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// Any OpenTelemetry meter provider receives the guard's metrics; here an
// in-memory reader stands in for an exporter (Prometheus, OTLP).
func ExampleNewWithConfig() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	ctx := context.Background()
	pool := env.Pool
	if _, err := pool.Exec(ctx, jobguard.Migration); err != nil {
		panic(err)
	}

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(ctx) }()
	guard, err := jobguard.NewWithConfig(ctx, pool, jobguard.DefaultTable(),
		jobguard.GuardConfig{MeterProvider: provider})
	if err != nil {
		panic(err)
	}

	var exec jobguard.Execution
	if err := pool.QueryRow(ctx, `INSERT INTO jobs (type, status, generation) VALUES ('chapter', 'PROCESSING', 1)
		RETURNING id::text, generation`).Scan(&exec.JobID, &exec.Generation); err != nil {
		panic(err)
	}
	_ = guard.CompleteIfActive(ctx, pool, exec) // accepted
	_ = guard.CompleteIfActive(ctx, pool, exec) // refused: the job is terminal

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Value == 0 {
					continue // every series exists from the start, at 0
				}
				outcome, _ := dp.Attributes.Value("outcome")
				reason, _ := dp.Attributes.Value("reason")
				fmt.Println(m.Name, outcome.AsString(), reason.AsString(), dp.Value)
			}
		}
	}
	// Unordered output:
	// jobguard.completions accepted  1
	// jobguard.completions refused terminal 1
}
