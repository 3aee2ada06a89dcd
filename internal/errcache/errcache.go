// Package errcache keeps one immutable error value per (function, code),
// so that the bindings' polling paths (a query answering "not ready") can
// return a typed error without allocating.
package errcache

import "sync"

// Cache maps a (function index, status code) pair to its *E.
type Cache[E any] struct {
	mu sync.RWMutex
	m  map[uint64]*E
}

// Get returns the cached value for (fn, code), making it with mk on the
// first use. Callers must treat the values as read-only.
func (c *Cache[E]) Get(fn int, code uint32, mk func() *E) *E {
	key := uint64(fn)<<32 | uint64(code)
	c.mu.RLock()
	e := c.m[key]
	c.mu.RUnlock()
	if e != nil {
		return e
	}
	e = mk()
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[key]; old != nil {
		return old
	}
	if c.m == nil {
		c.m = map[uint64]*E{}
	}
	c.m[key] = e
	return e
}
