package service

import (
	"fmt"
	"io"
	"log/slog"
)

// Handler is a log handler that writes to w as format says, text or json,
// the records at level (debug, info, warn or error) and above. Its errors
// name the setting without a flag's dashes: "log-level", "log-format".
func Handler(w io.Writer, format, level string) (slog.Handler, error) {
	var min slog.Level
	if err := min.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: min}
	switch format {
	case "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, fmt.Errorf("log-format %q: want text or json", format)
}
