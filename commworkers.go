package rocsync

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// rankWorkers submit the parts of a one-process collective for local ranks
// 1..N-1 under SubmitThreads (rank 0's runs on the caller's goroutine),
// each on a goroutine locked to its own OS thread for the communicator's
// life: NCCL's one thread per GPU, without a group. Starting a goroutine
// per rank and call made every collective wait for the scheduler to wake
// idle threads, which on a VM cost more than the collective's own launch.
// A worker spins for workerSpin after each part, so back-to-back
// collectives reach it without a wake-up, and then parks.
//
// SubmitGroup (runGroup) needs no thread: one goroutine submits every
// part inside ncclGroupStart/End. The workers remain for SubmitThreads,
// to compare the two, and for what a group cannot take: a task inside
// Record, a backend whose streams cannot be held.
type rankWorkers struct {
	w []*rankWorker
}

// workerSpin is how long a worker (or the caller waiting for the workers)
// polls before it parks: about fifteen back-to-back 1 MiB all-reduces on
// H200s. It must outlast the slowest rank's call of a collective, not
// only the gap between collectives: a worker whose part ends first waits
// for the others' before its next post, and one that parked then takes
// 50-150 µs to wake (a locked thread on a VM), which makes it the slowest
// of the next collective, and parks the others in turn. At 50 µs that
// cascade tripled the time of 4-rank all-reduces in some runs
// (docs/benchmarks.md); a spin ends at most this much of a core per rank
// after the last collective.
const workerSpin = 250 * time.Microsecond

type rankWorker struct {
	rank     int           // the local rank whose parts it runs
	posted   atomic.Uint64 // the newest job's number
	finished atomic.Uint64 // the newest finished job's number
	// job is written before posted and read after it; nil stops the worker.
	job func(rank int)
	// sleeping says the worker parks on wake; a poster that sees it sends a
	// token (stale tokens are harmless: every receive re-checks posted).
	sleeping atomic.Bool
	wake     chan struct{}
	// waiting says the caller parks on done.
	waiting atomic.Bool
	done    chan struct{}
}

func newRankWorkers(n int) *rankWorkers {
	ws := &rankWorkers{w: make([]*rankWorker, n)}
	for i := range ws.w {
		w := &rankWorker{rank: i + 1, wake: make(chan struct{}, 1), done: make(chan struct{}, 1)}
		ws.w[i] = w
		go w.loop()
	}
	return ws
}

func (w *rankWorker) loop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for seq := uint64(1); ; seq++ {
		if !spinUntil(func() bool { return w.posted.Load() >= seq }) {
			w.sleeping.Store(true)
			for w.posted.Load() < seq {
				<-w.wake
			}
			w.sleeping.Store(false)
		}
		if w.job == nil {
			w.finish(seq)
			return
		}
		w.job(w.rank)
		w.finish(seq)
	}
}

func (w *rankWorker) finish(seq uint64) {
	w.finished.Store(seq)
	if w.waiting.Load() {
		select {
		case w.done <- struct{}{}:
		default:
		}
	}
}

// post hands the worker its next job (nil: stop). Only the goroutine
// that runs the communicator's collectives posts.
func (w *rankWorker) post(job func(rank int)) {
	w.job = job
	seq := w.posted.Load() + 1
	w.posted.Store(seq)
	if w.sleeping.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// await returns once the job posted last has finished.
func (w *rankWorker) await() {
	seq := w.posted.Load()
	if spinUntil(func() bool { return w.finished.Load() >= seq }) {
		return
	}
	w.waiting.Store(true)
	for w.finished.Load() < seq {
		<-w.done
	}
	w.waiting.Store(false)
}

// spinUntil polls cond for up to workerSpin and says whether it held.
func spinUntil(cond func() bool) bool {
	var start time.Time
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if i&63 == 63 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > workerSpin {
				return false
			}
		}
	}
}

// run runs part(i) for every local rank at once, part(0) on the calling
// goroutine, and returns when all have returned. A part that panics is an
// error of its rank, not a crash of the process from a goroutine the
// caller cannot recover.
func (ws *rankWorkers) run(part func(i int)) {
	for _, w := range ws.w {
		w.post(part)
	}
	part(0)
	for _, w := range ws.w {
		w.await()
	}
}

// close ends the workers' goroutines.
func (ws *rankWorkers) close() {
	for _, w := range ws.w {
		w.post(nil)
		w.await()
	}
}

// recoverPart turns a panic in a rank's part into that rank's error.
func recoverPart(errs []error, i int) {
	if p := recover(); p != nil {
		errs[i] = fmt.Errorf("rank part panicked: %v", p)
	}
}
