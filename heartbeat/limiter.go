package heartbeat

import (
	"sync"
	"sync/atomic"
)

// limiter hands out one write slot per job per interval.
//
// Times are nanoseconds since the Heartbeat was created, so that a real
// clock's monotonic reading is used and wall-clock jumps do not matter.
//
// The throttled path (a job whose slot is taken) only reads: an atomic
// pointer, a sync.Map lookup and an atomic integer, so it neither allocates
// nor contends between cores. Everything that changes state (claiming a
// slot, rotating generations, Forget) happens under mu; that is at most one
// claim per job per interval, next to a database write.
//
// Memory is bounded without a background goroutine by two generations of
// entries. A claim goes into cur. The first claim at least one interval after
// cur was born rotates: cur becomes old and the previous old is dropped
// whole. Every entry in a dropped generation was claimed before the one
// after it was born, so at least an interval ago: it throttles nothing any
// more. The limiter therefore holds at most the jobs claimed in the last two
// generations, and a claim two intervals after the last rotation drops both.
type limiter struct {
	interval int64

	gens atomic.Pointer[generations]

	mu sync.Mutex
	// inflight are the jobs whose write has not returned. It keeps the
	// promise of one write in flight per job even for a write slower than
	// the interval, whose entry may already have been dropped.
	inflight map[string]struct{}
}

type generations struct {
	cur, old *generation
	born     int64 // when cur was created
}

type generation struct {
	m sync.Map // job id → *slot
	n int      // entries in m; guarded by limiter.mu
}

// slot is a job's last claim time. Only claim changes it, under limiter.mu;
// the throttled path reads it without the lock.
type slot struct{ last atomic.Int64 }

func newLimiter(interval, now int64) *limiter {
	l := &limiter{interval: interval, inflight: make(map[string]struct{})}
	l.gens.Store(&generations{cur: &generation{}, old: &generation{}, born: now})
	return l
}

func (g *generation) load(id string) *slot {
	v, ok := g.m.Load(id)
	if !ok {
		return nil
	}
	return v.(*slot)
}

func (g *generation) delete(id string) {
	if _, ok := g.m.LoadAndDelete(id); ok {
		g.n--
	}
}

// taken reports whether s was claimed less than an interval before now.
func (l *limiter) taken(s *slot, now int64) bool {
	return s != nil && now-s.last.Load() < l.interval
}

// throttled is the lock-free first check: true when id's slot is taken at
// now. False is only a hint; claim decides under the lock.
func (l *limiter) throttled(id string, now int64) bool {
	g := l.gens.Load()
	if s := g.cur.load(id); s != nil {
		return l.taken(s, now)
	}
	return l.taken(g.old.load(id), now)
}

// claim takes id's slot at now and marks a write in flight. It returns false
// when the slot is taken or a write for id has not returned yet. A caller
// that got true must call release when its write returns.
func (l *limiter) claim(id string, now int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.rotate(now)
	if _, busy := l.inflight[id]; busy {
		return false
	}
	if s := g.cur.load(id); s != nil {
		if l.taken(s, now) {
			return false
		}
		s.last.Store(now)
	} else {
		if l.taken(g.old.load(id), now) {
			return false
		}
		g.old.delete(id)
		s := &slot{}
		s.last.Store(now)
		g.cur.m.Store(id, s)
		g.cur.n++
	}
	l.inflight[id] = struct{}{}
	return true
}

// rotate drops the generations whose entries are all older than an
// interval. Called with mu held.
func (l *limiter) rotate(now int64) *generations {
	g := l.gens.Load()
	age := now - g.born
	if age < l.interval {
		return g
	}
	next := &generations{cur: &generation{}, old: g.cur, born: now}
	if age-l.interval >= l.interval { // age >= 2*interval, which may not fit an int64
		// cur's entries were all claimed before born+interval.
		next.old = &generation{}
	}
	l.gens.Store(next)
	return next
}

// release ends id's write.
func (l *limiter) release(id string) {
	l.mu.Lock()
	delete(l.inflight, id)
	l.mu.Unlock()
}

// forget drops id's entry; a write in flight stays in flight.
func (l *limiter) forget(id string) {
	l.mu.Lock()
	g := l.gens.Load()
	g.cur.delete(id)
	g.old.delete(id)
	l.mu.Unlock()
}

// len returns the entries held, stale ones included.
func (l *limiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gens.Load()
	return g.cur.n + g.old.n
}
