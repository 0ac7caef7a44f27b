package lease

import "context"

// RenewOnce runs one renewal, as the renewer does, for the benchmark.
func (l *Lease) RenewOnce(ctx context.Context) (bool, error) { return l.renewOnce(ctx, l.cfg.Timeout) }
