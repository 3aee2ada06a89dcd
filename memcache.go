package rocsync

import (
	"errors"
	"sync"

	"github.com/rocsync/rocsync/driver"
)

// DefaultMemoryCache is how many bytes of freed device memory a device
// keeps for reuse when Options.MemoryCache is 0.
const DefaultMemoryCache = 256 << 20

// memCache keeps freed device blocks for reuse by size, in the way of
// PyTorch's caching allocator: hipMalloc, hipFree, cuMemAlloc and
// cuMemFree cost microseconds each and the frees may synchronize the
// device, which would undo what the sync core saves. A block enters the
// cache only once every fence of the array that owned it has completed, so
// reuse needs no ordering of its own.
type memCache struct {
	mu     sync.Mutex
	blocks map[uint64][]driver.DevicePtr
	bytes  uint64
	limit  uint64
}

func newMemCache(limit int64) *memCache {
	switch {
	case limit == 0:
		limit = DefaultMemoryCache
	case limit < 0:
		limit = 0
	}
	return &memCache{blocks: map[uint64][]driver.DevicePtr{}, limit: uint64(limit)}
}

// take returns a cached block of exactly size bytes.
func (c *memCache) take(size uint64) (driver.DevicePtr, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.blocks[size]
	if len(l) == 0 {
		return 0, false
	}
	p := l[len(l)-1]
	c.blocks[size] = l[:len(l)-1]
	c.bytes -= size
	return p, true
}

// put keeps a block if it fits under the limit.
func (c *memCache) put(p driver.DevicePtr, size uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bytes+size > c.limit {
		return false
	}
	c.blocks[size] = append(c.blocks[size], p)
	c.bytes += size
	return true
}

// trim frees every cached block.
func (c *memCache) trim(dev driver.Device) error {
	c.mu.Lock()
	blocks := c.blocks
	c.blocks, c.bytes = map[uint64][]driver.DevicePtr{}, 0
	c.mu.Unlock()
	var errs []error
	for _, l := range blocks {
		for _, p := range l {
			errs = append(errs, dev.Free(p))
		}
	}
	return errors.Join(errs...)
}

// TrimCache frees the device memory kept for reuse.
func (d *Device) TrimCache() error {
	if err := d.enter("TrimCache"); err != nil {
		return err
	}
	defer d.leave()
	return asError("TrimCache", d.cache.trim(d.drv))
}
