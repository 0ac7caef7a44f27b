// Package service runs jobguard's sweeps as a long-running process: a
// logger on stderr, the metrics served for Prometheus at /metrics, and the
// loop that runs every sweep until the process is told to stop.
//
// The operator command's 'jobguard run' and the examples' reclaimer are
// both built on it, so that they serve, log and stop alike. It guarantees
// that the metrics server is shut down, within ShutdownTimeout, however
// the service ends; it does not build the guards or choose the sweeps:
// each program wires those itself. It is a module of its own, which the
// command's and the examples' modules require, so that its Prometheus
// exporter never reaches the library's users.
//
//	svc, err := service.Start("jobguard: run", log, "127.0.0.1:9464")
//	if err != nil {
//		return err
//	}
//	defer svc.Stop(ctx)
//	r, err := reclaim.New(reclaim.Config{..., MeterProvider: svc.MeterProvider()})
//	...
//	svc.Run(ctx, attrs, r.Run)
package service
