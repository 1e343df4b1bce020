package frontend

import (
	"reflect"
	"sync"
)

// Bounds of the closed-run result cache.
const (
	resultCacheMaxEntries = 4096
	resultCacheMaxBytes   = 16 << 20
	// resultCacheMaxEntry: a larger result is read from Temporal every time.
	resultCacheMaxEntry = 256 << 10
)

// resultCache remembers the decoded results of succeeded runs, so a get_* of a finished job
// costs one Describe instead of a Describe and a history read. A closed run never changes, and
// its run ID names it: the key is the workflow ID, the run ID (both from the Describe the call
// has just made and authorized) and the result's Go type.
//
// It holds only the workflow's result, which is the same for every caller: never a handle,
// a download link or anything else rendered for a principal. It is consulted only by
// readResult, after resolve has read the job afresh and applied the access policy to the
// caller; it never answers whether a job exists or who may see it.
//
// An entry is the result re-encoded as JSON (the result types round-trip through
// encoding/json), decoded into a fresh value for every call: callers share no memory.
// Bounded by entries and bytes; the oldest entries go first.
type resultCache = boundedCache[resultKey, []byte]

type resultKey struct {
	workflowID, runID string
	typ               reflect.Type
}

func newResultCache() *resultCache {
	return newBoundedCache[resultKey](resultCacheMaxEntries, resultCacheMaxBytes, resultCacheMaxEntry,
		func(b []byte) int { return len(b) })
}

// boundedCache is a map bounded by entries and by the bytes size says its values hold; when
// full the oldest entries go first. A value larger than maxEntry is not kept.
type boundedCache[K comparable, V any] struct {
	maxEntries, maxBytes, maxEntry int
	size                           func(V) int

	mu    sync.Mutex
	m     map[K]V
	order []K // insertion order, oldest first
	bytes int
}

func newBoundedCache[K comparable, V any](maxEntries, maxBytes, maxEntry int, size func(V) int) *boundedCache[K, V] {
	return &boundedCache[K, V]{maxEntries: maxEntries, maxBytes: maxBytes, maxEntry: maxEntry, size: size, m: make(map[K]V)}
}

func (c *boundedCache[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *boundedCache[K, V]) put(k K, v V) {
	n := c.size(v)
	if n > c.maxEntry {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	for len(c.order) > 0 && (len(c.m) >= c.maxEntries || c.bytes+n > c.maxBytes) {
		old := c.order[0]
		var zero K
		c.order[0] = zero
		c.order = c.order[1:]
		c.bytes -= c.size(c.m[old])
		delete(c.m, old)
	}
	c.m[k] = v
	c.order = append(c.order, k)
	c.bytes += n
}

func (c *boundedCache[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
