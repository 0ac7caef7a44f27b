package marker_test

import (
	"fmt"

	"github.com/jobguard/jobguard/internal/ident"
)

func sqlf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
func quote(name string) string               { return ident.Quote(name) }
