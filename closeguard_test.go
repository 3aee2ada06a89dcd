package rocsync

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// rlock is Device.enterShard's read lock of the guard.
func (g *closeGuard) rlock(shard int) {
	if !g.tryRLock(shard) {
		g.rlockSlow(shard)
	}
}

// The close guard keeps sync.RWMutex's contract: the writer holds it
// alone, and a reader never runs beside it, whatever the readers' shards.
func TestCloseGuardExcludesReadersAndWriter(t *testing.T) {
	var g closeGuard
	var readersIn, writerIn atomic.Int32
	var wg sync.WaitGroup
	const readers, rounds, writes = 8, 2000, 200
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				g.rlock(r * 5) // shards 0, 5, ... 35 (35 wraps to 3)
				readersIn.Add(1)
				if writerIn.Load() != 0 {
					t.Error("a reader ran while the writer held the guard")
				}
				readersIn.Add(-1)
				g.runlock(r * 5)
			}
		}()
	}
	// The writer takes the guard again and again while the readers run.
	var readersDone atomic.Bool
	go func() { wg.Wait(); readersDone.Store(true) }()
	n := 0
	for ; n < writes || !readersDone.Load(); n++ {
		g.lock()
		writerIn.Store(1)
		if in := readersIn.Load(); in != 0 {
			t.Errorf("the writer got the guard with %d readers in", in)
		}
		writerIn.Store(0)
		g.unlock()
	}
	wg.Wait()
}

// lock waits for a reader already in, however long it stays.
func TestCloseGuardWriterWaitsForReader(t *testing.T) {
	var g closeGuard
	g.rlock(7)
	locked := make(chan struct{})
	go func() {
		g.lock()
		close(locked)
	}()
	for g.reader(7).Load() >= 0 { // until the writer has biased the shards
		runtime.Gosched()
	}
	select {
	case <-locked:
		t.Fatal("lock returned while a reader held the guard")
	default:
	}
	g.runlock(7)
	<-locked
	g.unlock()
}

// A reader that comes while the writer holds the guard waits for unlock,
// and leaves no count behind while it waits.
func TestCloseGuardReaderWaitsForWriter(t *testing.T) {
	var g closeGuard
	g.lock()
	in := make(chan struct{})
	go func() {
		g.rlock(3)
		close(in)
		g.runlock(3)
	}()
	for g.waiting.Load() == 0 {
		select {
		case <-in:
			t.Fatal("a reader got in while the writer held the guard")
		default:
			runtime.Gosched()
		}
	}
	// The waiting reader has stepped back: it holds no count.
	if n := g.reader(3).Load() + guardBias; n != 0 {
		t.Fatalf("shard 3 counts %d readers while its one reader waits", n)
	}
	g.unlock()
	<-in
	g.lock() // the reader left: the writer gets it again
	g.unlock()
}

// Tasks count in shards of the device's counters and close guard, shard 0
// left to the device's own calls, and the device's Stats sum every shard.
func TestTasksCountInTheirOwnShards(t *testing.T) {
	d := openEmu(t, DeviceSide, EmulatorOptions{})[0]
	defer d.Close()
	before := d.Stats().Dispatches
	seen := map[int]bool{}
	x, err := d.FromFloat32(1, 4, make([]float32, 4))
	if err != nil {
		t.Fatal(err)
	}
	for range guardShards + 2 {
		tk, err := d.NewTask()
		if err != nil {
			t.Fatal(err)
		}
		if tk.shard <= 0 || tk.shard >= guardShards {
			t.Fatalf("task shard %d, want 1..%d", tk.shard, guardShards-1)
		}
		seen[tk.shard] = true
		if err := tk.AddInto(x, x, x); err != nil {
			t.Fatal(err)
		}
		if err := tk.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != guardShards-1 {
		t.Errorf("%d tasks used %d shards, want %d", guardShards+2, len(seen), guardShards-1)
	}
	if got := d.Stats().Dispatches - before; got != guardShards+2 {
		t.Errorf("device counts %d dispatches of its tasks, want %d", got, guardShards+2)
	}
}
