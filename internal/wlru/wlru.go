// Package wlru is a small least-recently-used cache bounded by the total
// weight of what it holds (the vertices of compiled flows, say), not by a
// count of entries: a process that met a few huge values holds a few, one
// that met many small ones holds many.
//
// The zero Cache is not usable; make one with New. Its methods are safe for
// concurrent use. Values are shared between callers, so they must not be
// changed once put.
package wlru

import "sync"

// Cache maps keys to values of a weight, within a bound on the sum of the
// weights; the least recently used entries go first when a new one needs
// the room. A value heavier than the whole bound is not kept.
type Cache[K comparable, V any] struct {
	mu     sync.Mutex
	max    int
	weight int
	tick   uint64
	hits   uint64
	m      map[K]*entry[V]
}

type entry[V any] struct {
	v      V
	weight int
	used   uint64
}

// New returns an empty cache holding values of total weight max at most.
func New[K comparable, V any](max int) *Cache[K, V] {
	return &Cache[K, V]{max: max, m: map[K]*entry[V]{}}
}

// Get returns the value held for k and marks it used.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.tick++
	e.used = c.tick
	c.hits++
	return e.v, true
}

// Put holds v, of the given weight, for k, evicting the least recently used
// entries as the bound needs. A key already held keeps its first value (two
// callers that made the same value at once share the first one put).
func (c *Cache[K, V]) Put(k K, v V, weight int) {
	if weight > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	for c.weight+weight > c.max {
		var oldK K
		var old *entry[V]
		for k, e := range c.m { // linear: a cache holds a handful of entries
			if old == nil || e.used < old.used {
				oldK, old = k, e
			}
		}
		delete(c.m, oldK)
		c.weight -= old.weight
	}
	c.tick++
	c.m[k] = &entry[V]{v: v, weight: weight, used: c.tick}
	c.weight += weight
}

// Stats returns how many entries the cache holds, their total weight, and
// how many Gets found their key.
func (c *Cache[K, V]) Stats() (entries, weight int, hits uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.weight, c.hits
}

// Clear drops every entry (hits are kept).
func (c *Cache[K, V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.weight = 0
}
