// Package testkit groups the test harness: what the tests, benchmarks and
// examples use to reach real servers and to break them (testenv, endpoint,
// fixture, netproxy, rediscluster, chaos, history, model, metricstest,
// sourcetest, panicky), a job's whole life measured beside its floor
// (perf), and the test of the top-level README (readme). The
// library itself never imports it; its own helpers (ident, sqlfile,
// metrics, txstate, txbatch, safe) sit beside it under internal.
package testkit
