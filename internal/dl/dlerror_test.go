package dl

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// dlerror's text belongs to the thread whose dlopen or dlsym failed
// (POSIX dlerror: "A thread-safe implementation shall return only errors
// that occur on the current thread"; glibc's is one), so it must be read
// on that thread. lostUnderLoad calls fail 800 times from 8 goroutines
// while other goroutines keep every P busy, which makes the scheduler move
// a goroutine between two separate calls on an unlocked thread, and
// counts the failures whose text came back empty.
func lostUnderLoad(t *testing.T, fail func() (text string, err error)) int64 {
	t.Helper()
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
				text, err := fail()
				if err != nil {
					t.Error(err)
					return
				}
				if text == "" {
					lost.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return lost.Load()
}

func TestNotFoundErrorKeepsDlerrorTextUnderLoad(t *testing.T) {
	lost := lostUnderLoad(t, func() (string, error) {
		_, err := Open("libnothing", []string{"libnothing-rocsync-test.so.0"}, nil)
		var nf *NotFoundError
		if !errors.As(err, &nf) {
			return "", errors.New("Open of a missing library: not a *NotFoundError")
		}
		return nf.Last, nil
	})
	if lost > 0 {
		t.Errorf("%d of 800 failed opens lost dlopen's error text", lost)
	}
}

func TestDlsymErrorKeepsDlerrorTextUnderLoad(t *testing.T) {
	libc, err := Dlopen("libc.so.6", 2) // RTLD_NOW
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	lost := lostUnderLoad(t, func() (string, error) {
		_, err := Dlsym(libc, "rocsync_no_such_symbol")
		if err == nil {
			return "", errors.New("Dlsym of a missing symbol succeeded")
		}
		return err.Error(), nil
	})
	if lost > 0 {
		t.Errorf("%d of 800 failed lookups lost dlsym's error text", lost)
	}
}
