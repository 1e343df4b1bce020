package payloadcrypt

import "container/list"

// lru is a map bounded to n entries that drops the least recently used: a deployment with
// many tenants keeps the active ones' keys unwrapped, and a KMS call brings back the others.
// Not safe for concurrent use (Store holds its mutex).
type lru[V any] struct {
	n     int
	order *list.List // front: most recent; elements are *lruEntry[V]
	items map[string]*list.Element
}

type lruEntry[V any] struct {
	key string
	val V
}

func newLRU[V any](n int) *lru[V] {
	return &lru[V]{n: n, order: list.New(), items: make(map[string]*list.Element)}
}

func (c *lru[V]) get(k string) (V, bool) {
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruEntry[V]).val, true
	}
	var zero V
	return zero, false
}

func (c *lru[V]) put(k string, v V) {
	if e, ok := c.items[k]; ok {
		e.Value.(*lruEntry[V]).val = v
		c.order.MoveToFront(e)
		return
	}
	c.items[k] = c.order.PushFront(&lruEntry[V]{key: k, val: v})
	for c.order.Len() > c.n {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*lruEntry[V]).key)
	}
}

func (c *lru[V]) len() int { return c.order.Len() }

func (c *lru[V]) remove(k string) {
	if e, ok := c.items[k]; ok {
		c.order.Remove(e)
		delete(c.items, k)
	}
}

// removeIf removes every entry whose key matches.
func (c *lru[V]) removeIf(match func(string) bool) {
	for k := range c.items {
		if match(k) {
			c.remove(k)
		}
	}
}
