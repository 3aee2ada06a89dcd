package rocsync

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/testhooks"
)

func randomBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// chunking covers every byte once, in at most maxCopyChunks chunks of at
// least copyChunk bytes (but for the last), whatever the size.
func TestChunkingCoversEveryByte(t *testing.T) {
	for _, size := range []uint64{0, 1, copyChunk - 1, copyChunk, copyChunk + 1, 3 * copyChunk, 3*copyChunk + 7,
		maxCopyChunks * copyChunk, maxCopyChunks*copyChunk + 1, 1 << 30, 1<<30 + 12345, 40 << 30} {
		chunk, n := chunking(size)
		require.GreaterOrEqual(t, chunk, uint64(copyChunk), "size %d", size)
		require.LessOrEqual(t, n, maxCopyChunks, "size %d", size)
		require.GreaterOrEqual(t, n, 1)
		require.Equal(t, uint64(0), chunk%minStaging, "chunks stay page aligned")
		if size > 0 {
			require.Greater(t, uint64(n)*chunk, size-1, "size %d: the chunks cover it", size)
			require.Less(t, uint64(n-1)*chunk, size, "size %d: no empty chunk", size)
		}
	}
}

// Uploads and downloads of sizes around the chunk size (one byte, one
// byte short of a chunk, exact multiples, a remainder) are split into
// the expected number of copy ops and carry every byte, under every
// policy with the hazard checker and random delays on; a device-to-device
// copy between them and a second download see the uploaded data.
func TestCopyChunkBoundaries(t *testing.T) {
	sizes := []int{1, 4097, copyChunk - 1, copyChunk, copyChunk + 1, 2 * copyChunk, 3*copyChunk + 12345}
	for _, p := range allPolicies {
		t.Run(p.String(), func(t *testing.T) {
			d := openOpPath(t, p)
			tk, err := d.NewTask()
			require.NoError(t, err)
			for i, size := range sizes {
				host := randomBytes(size, int64(i))
				a, err := d.NewBuffer(size)
				require.NoError(t, err)
				b, err := d.NewBuffer(size)
				require.NoError(t, err)
				_, wantChunks := chunking(uint64(size))
				before := tk.Stats().Dispatches
				require.NoError(t, tk.Upload(a, host))
				require.Equal(t, uint64(wantChunks), tk.Stats().Dispatches-before, "size %d: one copy op per chunk", size)
				require.NoError(t, tk.CopyBuffer(b, a))
				gotA, gotB := make([]byte, size), make([]byte, size)
				pa, err := tk.Download(a, gotA)
				require.NoError(t, err)
				pb, err := tk.Download(b, gotB)
				require.NoError(t, err)
				require.NoError(t, pb.Wait(context.Background())) // out of order: a's parts are pinned
				require.NoError(t, pa.Wait(context.Background()))
				require.Equal(t, host, gotA, "size %d", size)
				require.Equal(t, host, gotB, "size %d", size)
				require.NoError(t, pa.Wait(context.Background()), "Wait again returns the same")
				require.NoError(t, a.Free())
				require.NoError(t, b.Free())
			}
			require.NoError(t, tk.Close())
			require.NoError(t, d.Synchronize())
			require.Empty(t, d.Hazards())
		})
	}
}

// Many copies at once from several goroutines, each with its own task,
// large (chunked) and small, into buffers of their own and out of one
// they share, are ordered and correct, and the staging pool stays bounded.
func TestManyConcurrentCopies(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	shared := randomBytes(copyChunk+333, 99)
	sb, err := d.NewBuffer(len(shared))
	require.NoError(t, err)
	require.NoError(t, d.DefaultTask().Upload(sb, shared))
	const workers, rounds = 6, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				tk, err := d.NewTask()
				if err != nil {
					return err
				}
				defer tk.Close()
				for r := range rounds {
					size := 1 + (w*7919+r*104729)%(2*copyChunk+5)
					host := randomBytes(size, int64(w*100+r))
					buf, err := d.NewBuffer(size)
					if err != nil {
						return err
					}
					if err := tk.Upload(buf, host); err != nil {
						return err
					}
					got := make([]byte, size)
					pend, err := tk.Download(buf, got)
					if err != nil {
						return err
					}
					gotShared := make([]byte, len(shared))
					ps, err := tk.Download(sb, gotShared)
					if err != nil {
						return err
					}
					if err := pend.Wait(context.Background()); err != nil {
						return err
					}
					if err := ps.Wait(context.Background()); err != nil {
						return err
					}
					if string(got) != string(host) || string(gotShared) != string(shared) {
						return fmt.Errorf("worker %d round %d: data differs", w, r)
					}
					if err := buf.Free(); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, d.Synchronize())
	require.Empty(t, d.Hazards())
	slots, _ := d.Staged()
	require.LessOrEqual(t, slots, maxStaging+workers, "the pool grows past its bound only for downloads not yet waited for")
}

// A staging slot is reused only once its last copy has completed: with
// the wait removed (the slot handed out while its upload's DMA is still
// queued), the host's copy into staging races the DMA that reads it and
// the hazard checker reports it; with the wait, the same program is
// clean and the device holds each upload's data.
func TestStagingReuseWithoutWaitIsARace(t *testing.T) {
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("skipWait=%v", skip), func(t *testing.T) {
			d := openOpPath(t, DeviceSide)
			tk := d.DefaultTask()
			first, second := randomBytes(4096, 1), randomBytes(4096, 2)
			a, err := d.NewBuffer(4096)
			require.NoError(t, err)
			b, err := d.NewBuffer(4096)
			require.NoError(t, err)
			release := d.machine().Hold() // the first upload's DMA stays queued
			require.NoError(t, tk.Upload(a, first))
			testhooks.SkipStagingWait.Store(skip)
			err = tk.Upload(b, second)
			testhooks.SkipStagingWait.Store(false)
			require.NoError(t, err)
			release()
			require.NoError(t, d.Synchronize())
			if skip {
				require.NotEmpty(t, d.Hazards(), "the host overwrote staging memory a queued copy reads")
				require.Contains(t, fmt.Sprint(d.Hazards()), "CPU copy into staging")
				return
			}
			require.Empty(t, d.Hazards())
			require.Equal(t, 2, func() int { n, _ := d.Staged(); return n }(), "the busy slot was not reused")
			for _, c := range []struct {
				buf  *Buffer
				want []byte
			}{{a, first}, {b, second}} {
				got := make([]byte, 4096)
				p, err := tk.Download(c.buf, got)
				require.NoError(t, err)
				require.NoError(t, p.Wait(context.Background()))
				require.Equal(t, c.want, got)
			}
		})
	}
}

// With the pool full of slots whose copies are queued, a copy waits for
// the oldest (a counted throttle wait), in one blocking wait, and the
// pool does not grow.
func TestStagingPoolFullWaitsForTheOldest(t *testing.T) {
	d := openOpPath(t, DeviceSide)
	tk := d.DefaultTask()
	bufs := make([]*Buffer, maxStaging+4)
	for i := range bufs {
		var err error
		bufs[i], err = d.NewBuffer(minStaging)
		require.NoError(t, err)
	}
	release := d.machine().Hold()
	for i := range maxStaging {
		require.NoError(t, tk.Upload(bufs[i], randomBytes(minStaging, int64(i))))
	}
	n, _ := d.Staged()
	require.Equal(t, maxStaging, n)
	go func() { time.Sleep(20 * time.Millisecond); release() }()
	before := d.Stats().HostWaits[ReasonThrottle]
	for i := maxStaging; i < len(bufs); i++ {
		require.NoError(t, tk.Upload(bufs[i], randomBytes(minStaging, int64(i))))
	}
	require.Greater(t, d.Stats().HostWaits[ReasonThrottle], before)
	n, _ = d.Staged()
	require.Equal(t, maxStaging, n, "the pool did not grow")
	for i, b := range bufs {
		got := make([]byte, minStaging)
		p, err := tk.Download(b, got)
		require.NoError(t, err)
		require.NoError(t, p.Wait(context.Background()))
		require.Equal(t, randomBytes(minStaging, int64(i)), got)
	}
	require.Empty(t, d.Hazards())
}

// A bounded wait for a copy gives up at the timeout (typed ErrTimeout)
// and the download stays pending: waited again once the device runs, it
// delivers the data.
func TestDownloadWaitTimesOutAndResumes(t *testing.T) {
	d, err := Open(Options{Backend: Emulator, LogLevel: LogOff, WaitTimeout: 30 * time.Millisecond,
		Emulator: EmulatorOptions{HazardChecker: true}})
	require.NoError(t, err)
	defer d.Close()
	tk := d.DefaultTask()
	want := randomBytes(2*copyChunk+1, 5)
	buf, err := d.NewBuffer(len(want))
	require.NoError(t, err)
	require.NoError(t, tk.Upload(buf, want))
	// The 30 ms WaitTimeout is the subject, not a budget for the work: a
	// wait that times out on a loaded machine is made again, as a caller
	// would, until the work is done.
	untilDone(t, tk.Synchronize)
	release := d.machine().Hold()
	got := make([]byte, len(want))
	p, err := tk.Download(buf, got)
	require.NoError(t, err)
	//lint:ignore SA1012 Wait documents a nil ctx as none; this holds it to that
	require.ErrorIs(t, p.Wait(nil), ErrTimeout)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, p.Wait(ctx), ErrTimeout, "a done context ends the wait")
	release()
	untilDone(t, func() error { return p.Wait(context.Background()) })
	require.Equal(t, want, got)
	require.Empty(t, d.Hazards())
}

// untilDone repeats a wait that ends in ErrTimeout (the work goes on) until
// it ends otherwise, and requires that to be success.
func untilDone(t *testing.T, wait func() error) {
	t.Helper()
	err := wait()
	for errors.Is(err, ErrTimeout) {
		err = wait()
	}
	require.NoError(t, err)
}

// hostCopy's parallel split carries every byte for sizes around its
// thresholds.
func TestHostCopyParallelSplit(t *testing.T) {
	var wg sync.WaitGroup
	for _, n := range []int{0, 1, parallelCopyMin - 1, parallelCopyMin, parallelCopyMin + 63, 8*parallelCopyShare + 1, 5<<20 + 3} {
		src := randomBytes(n, int64(n))
		dst := make([]byte, n)
		hostCopy(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), uint64(n), &wg)
		require.Equal(t, src, dst, "n=%d", n)
	}
}

// Downloads nobody waits for do not pin staging memory until Close: a
// released Pending (Release, or the garbage collector for one dropped)
// returns its slot to the pool, reused once its copy completes, so 2,000
// of them stay within the pool's bound; Wait after Release is ErrInvalid
// and leaves the destination alone.
func TestUnwaitedDownloadsReleaseStaging(t *testing.T) {
	for _, how := range []string{"Release", "dropped"} {
		t.Run(how, func(t *testing.T) {
			d := openStrict(t, DeviceSide)
			tk := d.DefaultTask()
			buf, err := d.NewBuffer(64 << 10)
			require.NoError(t, err)
			require.NoError(t, tk.Upload(buf, randomBytes(64<<10, 3)))
			host := make([]byte, 64<<10)
			for i := range 2000 {
				if how == "Release" {
					p, err := tk.Download(buf, host)
					require.NoError(t, err)
					p.Release()
					if i == 0 {
						require.ErrorIs(t, p.Wait(context.Background()), ErrInvalid)
						p.Release() // again: nothing
					}
					continue
				}
				dropDownload(t, tk, buf, host)
				if i%100 == 99 {
					runtime.GC() // queues the dropped Pendings' finalizers
				}
			}
			require.NoError(t, d.Synchronize())
			if how == "dropped" {
				// The finalizers run on the runtime's goroutine: collect
				// until they have (bounded by the test's own timeout); each
				// download's take frees the idle slots past the bound.
				for slots, _ := d.Staged(); slots > maxStaging; slots, _ = d.Staged() {
					runtime.GC()
					p, err := tk.Download(buf, host)
					require.NoError(t, err)
					require.NoError(t, p.Wait(context.Background()))
				}
			}
			slots, bytes := d.Staged()
			require.LessOrEqual(t, slots, maxStaging, "%d bytes pinned", bytes)
			require.Empty(t, d.Hazards())
		})
	}
}

// dropDownload starts a download and drops its Pending.
//
//go:noinline
func dropDownload(t *testing.T, tk *Task, buf *Buffer, host []byte) {
	_, err := tk.Download(buf, host)
	require.NoError(t, err)
}
