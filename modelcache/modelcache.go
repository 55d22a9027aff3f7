// Package modelcache is a node's one cache of loaded models, shared by the jobs' executor
// and HTTP serving, so a model file both use is compiled and held in memory once.
package modelcache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	"idunno/kernel"
)

// DefaultSize is how many models a cache keeps loaded when New is given no size.
const DefaultSize = 8

// Cache holds loaded models by key, at most Size of them: when a model beyond that is
// loaded, the least recently acquired one leaves the cache and is closed once no holder
// uses it any more (models in use are never closed under their users; while they are used
// the cache may briefly hold more than Size). Safe for concurrent use.
type Cache struct {
	mu  sync.Mutex // guards lru and every entry's refs and gone
	lru *lru.Cache[string, *entry]
}

type entry struct {
	once sync.Once
	m    *kernel.Model
	err  error
	refs int  // holders
	gone bool // left the cache: close at the last release
}

// Handle is one holder's use of a cached model; Release it when done.
type Handle struct {
	c    *Cache
	e    *entry
	once sync.Once
}

// New returns a cache of at most size models (DefaultSize if size <= 0).
func New(size int) *Cache {
	if size <= 0 {
		size = DefaultSize
	}
	c := &Cache{}
	// The callback runs inside lru's calls, which are made with c.mu held.
	l, err := lru.NewWithEvict(size, func(_ string, e *entry) {
		e.gone = true
		if e.refs == 0 {
			go e.close()
		}
	})
	if err != nil {
		panic("modelcache: " + err.Error()) // only for size <= 0, excluded above
	}
	c.lru = l
	return c
}

// Key names a model file's bytes loaded with the given kernel threads and precision.
func Key(file []byte, threads int, prec kernel.Precision) string {
	sum := sha256.Sum256(file)
	return fmt.Sprintf("%s/t%d/%s", hex.EncodeToString(sum[:]), threads, prec)
}

// Acquire returns the model cached under key, calling load (once, whoever asks at the same
// time) when it is not. A failed load is not cached.
func (c *Cache) Acquire(key string, load func() (*kernel.Model, error)) (*Handle, error) {
	c.mu.Lock()
	e, ok := c.lru.Get(key)
	if !ok {
		e = &entry{}
		c.lru.Add(key, e)
	}
	e.refs++
	c.mu.Unlock()
	e.once.Do(func() {
		e.m, e.err = load()
		if e.err == nil && e.m == nil {
			e.err = fmt.Errorf("modelcache: %s: load returned no model", key)
		}
	})
	h := &Handle{c: c, e: e}
	if e.err != nil {
		c.mu.Lock()
		if cur, ok := c.lru.Peek(key); ok && cur == e {
			c.lru.Remove(key)
		}
		c.mu.Unlock()
		h.Release()
		return nil, e.err
	}
	return h, nil
}

// Model returns the handle's model.
func (h *Handle) Model() *kernel.Model { return h.e.m }

// Release ends this holder's use; later calls do nothing.
func (h *Handle) Release() {
	h.once.Do(func() {
		h.c.mu.Lock()
		h.e.refs--
		last := h.e.refs == 0 && h.e.gone
		h.c.mu.Unlock()
		if last {
			h.e.close()
		}
	})
}

// Len returns how many models the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Purge drops every model from the cache; each is closed once its holders release it.
func (c *Cache) Purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Purge()
}

func (e *entry) close() {
	if e.m != nil {
		e.m.Close()
	}
}
