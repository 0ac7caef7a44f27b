package marker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// A nil guard is a clear error, not a panic at the first call.
func TestNewStores_ANilGuardIsRefused(t *testing.T) {
	t.Parallel()
	var g *jobguard.Guard
	_, err := marker.NewPostgresStore(g, marker.Config{})
	require.ErrorContains(t, err, "jobs is nil")
	_, err = marker.NewRedisStore(g, nil, marker.Config{})
	require.ErrorContains(t, err, "jobs is nil")
}
