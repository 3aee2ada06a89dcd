package dl

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// dlerror's text belongs to the thread whose dlopen failed (POSIX dlerror:
// "A thread-safe implementation shall return only errors that occur on the
// current thread"; glibc's is one), so Open must read it on that thread. Goroutines that keep every P busy make the scheduler
// move a goroutine between its dlopen and its dlerror when they are two
// separate calls on an unlocked thread; every error must still carry its text.
func TestNotFoundErrorKeepsDlerrorTextUnderLoad(t *testing.T) {
	var stop atomic.Bool
	var hogs sync.WaitGroup
	for range runtime.GOMAXPROCS(0) * 2 {
		hogs.Add(1)
		go func() {
			defer hogs.Done()
			for !stop.Load() {
			}
		}()
	}
	defer func() { stop.Store(true); hogs.Wait() }()

	const workers, each = 8, 100
	var lost atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, err := Open("libnothing", []string{"libnothing-rocsync-test.so.0"}, nil)
				var nf *NotFoundError
				if !errors.As(err, &nf) {
					t.Errorf("Open of a missing library: %v", err)
					return
				}
				if nf.Last == "" {
					lost.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := lost.Load(); n > 0 {
		t.Errorf("%d of %d failed opens lost dlopen's error text", n, workers*each)
	}
}
