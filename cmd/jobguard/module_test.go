package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The command is a module of its own so that its Prometheus exporter never
// reaches the library's users: the library's go.mod requires none of it.
func TestModule_LibraryRequiresNoPrometheusExporter(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "mod", "edit", "-json", filepath.Join("..", "..", "go.mod")).Output()
	require.NoError(t, err)
	var mod struct {
		Module  struct{ Path string }
		Require []struct{ Path, Version string }
	}
	require.NoError(t, json.Unmarshal(out, &mod))
	require.Equal(t, "github.com/jobguard/jobguard", mod.Module.Path)
	for _, r := range mod.Require {
		require.False(t, strings.HasPrefix(r.Path, "github.com/prometheus/") ||
			r.Path == "go.opentelemetry.io/otel/exporters/prometheus",
			"the library's go.mod requires %s %s", r.Path, r.Version)
	}
}
