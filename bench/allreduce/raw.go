package main

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/bench/internal/measure"
	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/nccl"
)

// rawOneProcess times the same all-reduces with NCCL and the CUDA driver
// alone, without rocsync, in one process over every GPU: the floor for
// that shape. With -submit threads each rank's goroutine is locked to its
// thread with the GPU's primary context current and calls ncclAllReduce on
// its own stream; with -submit group one thread makes every rank's call
// inside ncclGroupStart/ncclGroupEnd. Each round ends with every stream
// synchronized. The buffers are not initialized: the sums are not checked
// (the rocsync shapes check theirs), and their values do not change the
// time of a sum.
func rawOneProcess(cfg config) (rs []result, err error) {
	if err := nccl.DisableNVLS(); err != nil {
		return nil, err
	}
	cu, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	if err := cu.Init(); err != nil {
		return nil, err
	}
	nl, err := nccl.OpenNCCL()
	if err != nil {
		return nil, err
	}
	n := cfg.devices
	ctxs := make([]*cuda.Ctx, n)
	streams := make([]cuda.Stream, n)
	devices := make([]int, n)
	defer func() {
		for i, c := range ctxs {
			if c == nil {
				continue
			}
			if streams[i] != 0 {
				err = errors.Join(err, c.StreamDestroy(streams[i]))
			}
			err = errors.Join(err, c.Release())
		}
	}()
	for i := range n {
		d, err := cu.DeviceGet(i)
		if err != nil {
			return nil, err
		}
		if ctxs[i], err = cu.PrimaryCtxRetain(d); err != nil {
			return nil, err
		}
		if streams[i], err = ctxs[i].StreamCreate(1); err != nil { // CU_STREAM_NON_BLOCKING
			return nil, err
		}
		devices[i] = i
	}
	comms, err := nl.CommInitAll(devices)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range comms {
			err = errors.Join(err, nl.CommDestroy(c))
		}
	}()
	for _, size := range cfg.sizes {
		r, err := rawSize(cfg, nl, ctxs, streams, comms, size)
		if err != nil {
			return rs, fmt.Errorf("%d bytes: %w", size, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func rawSize(cfg config, nl *nccl.Lib, ctxs []*cuda.Ctx, streams []cuda.Stream, comms []nccl.Comm, size int) (res result, err error) {
	n := len(ctxs)
	bufs := make([]cuda.DevicePtr, n)
	defer func() {
		for i, b := range bufs {
			if b != 0 {
				err = errors.Join(err, ctxs[i].MemFree(b))
			}
		}
	}()
	for i, c := range ctxs {
		if bufs[i], err = c.MemAlloc(uint64(size)); err != nil {
			return res, err
		}
	}
	elems := size / 4
	reduce := func(i int) error {
		return nl.AllReduce(uintptr(bufs[i]), uintptr(bufs[i]), elems, nccl.Float32, nccl.Sum, comms[i], uintptr(streams[i]))
	}
	var round func() error
	if cfg.submit == rocsync.SubmitGroup {
		round = func() error {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for range cfg.batch {
				if err := nl.GroupStart(); err != nil {
					return err
				}
				var errs []error
				for i := range n {
					errs = append(errs, reduce(i))
				}
				if err := errors.Join(append(errs, nl.GroupEnd())...); err != nil {
					return err
				}
			}
			for i, c := range ctxs {
				if err := c.StreamSynchronize(streams[i]); err != nil {
					return err
				}
			}
			return nil
		}
	} else {
		// One locked thread per rank, started once and fed a round at a
		// time, as rocsync's rank workers are.
		var step *spinBarrier
		if cfg.lockstep {
			step = &spinBarrier{n: int64(n)}
		}
		start := make([]chan struct{}, n)
		done := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			start[i] = make(chan struct{})
			wg.Go(func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if err := ctxs[i].MakeCurrent(); err != nil {
					for range start[i] {
						done <- err
					}
					return
				}
				for range start[i] {
					var err error
					for range cfg.batch {
						if err = reduce(i); err != nil {
							if step != nil {
								step.breakAll()
							}
							break
						}
						if step != nil && !step.wait() {
							err = errors.New("another rank's call failed")
							break
						}
					}
					if err == nil {
						err = ctxs[i].StreamSynchronize(streams[i])
					}
					done <- err
				}
			})
		}
		defer func() {
			for _, c := range start {
				close(c)
			}
			wg.Wait()
		}()
		round = func() error {
			for _, c := range start {
				c <- struct{}{}
			}
			var errs []error
			for range n {
				errs = append(errs, <-done)
			}
			return errors.Join(errs...)
		}
	}
	per := make([]float64, 0, cfg.rounds)
	for r := 0; r < cfg.warmup+cfg.rounds; r++ {
		t0 := time.Now()
		if err := round(); err != nil {
			return res, err
		}
		if r >= cfg.warmup {
			per = append(per, measure.Micros(time.Since(t0))/float64(cfg.batch))
		}
	}
	med := measure.Quantile(per, 0.5)
	submit := cfg.submit.String()
	if cfg.lockstep {
		submit += ", lock-step"
	}
	res = result{Shape: "1 process, raw NCCL", Submit: submit, Backend: "cuda", Devices: n, Bytes: size, MedianUS: med,
		P90US: measure.Quantile(per, 0.9), Rounds: cfg.rounds, Batch: cfg.batch}
	if med > 0 {
		res.BusGBps = 2 * float64(n-1) / float64(n) * float64(size) / (med * 1e3)
	}
	return res, nil
}

// spinBarrier holds each of n threads until all n have reached it; it
// spins, as rocsync's rank workers and the goroutine that waits for them
// do between back-to-back collectives. A thread whose call failed breaks
// it (breakAll), so that the others leave their rounds instead of waiting
// for ever.
type spinBarrier struct {
	n       int64
	arrived atomic.Int64
	gen     atomic.Int64
	broken  atomic.Bool
}

// wait returns once all n threads have reached it (true) or one broke it
// (false).
func (b *spinBarrier) wait() bool {
	gen := b.gen.Load()
	if b.arrived.Add(1) == b.n {
		b.arrived.Store(0)
		b.gen.Add(1)
		return true
	}
	for i := 1; b.gen.Load() == gen; i++ {
		if b.broken.Load() {
			return false
		}
		if i%(1<<14) == 0 {
			// Tens of microseconds of spinning: let a goroutine that
			// shares this P run (on a machine with fewer cores than
			// ranks). A locked thread that yields sooner parks, and
			// its wake-up would be timed as lock-step.
			runtime.Gosched()
		}
	}
	return true
}

// breakAll releases every thread waiting, and every later wait, with false.
func (b *spinBarrier) breakAll() { b.broken.Store(true) }
