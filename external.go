package rocsync

import "github.com/rocsync/rocsync/driver"

// A handshake with work outside rocsync, in the manner of DLPack's
// __dlpack__(stream=...): a consumer hands the producer its stream, and the
// producer makes that stream wait, on the device, for the array's pending
// work ("wait for event"), so the consumer may use the array on its stream
// at once and nobody waits on the host. rocsync plays both parts with a
// raw stream of its runtime (hipStream_t on ROCm, CUstream on CUDA) that
// belongs to someone else, a foreign library or a second framework:
//
//   - ExportTo: the foreign stream waits for what the operands' accesses
//     must follow: for In(x), x's last writer; for Out(x) and InOut(x),
//     its writer and its readers too;
//   - ImportFrom: rocsync's later ops on the operands wait for everything
//     enqueued on the foreign stream so far: its write of Out(x) and
//     InOut(x) becomes x's writer, its read of In(x) one of x's readers (a
//     later rocsync write waits for it).
//
// Bracket the foreign work with both, naming the same operands:
//
//	tk.ExportTo(s, In(x), Out(y))  // s waits for x's writer, y's writer and readers
//	... foreign work on s reading x and writing y ...
//	tk.ImportFrom(s, In(x), Out(y)) // rocsync's next ops on x and y wait for s
//
// A foreign producer that only writes (rocsync did not hand it the
// buffer's contents) may skip ExportTo if the buffer has no pending work
// (a new buffer); a foreign consumer that only reads must still call
// ImportFrom before rocsync overwrites what it reads. Leaving either out
// is a race the ordering cannot see (the emulator's hazard checker
// reports it). Both are ops on the task's library stream, ordered and
// recorded like a LibraryCall; neither blocks the host.

// ExportTo makes the foreign stream wait, on the device, for the work the
// operands' accesses must follow (see above). stream is a raw stream
// handle of the device's runtime; 0 is its default (null) stream.
// Operands are buffers or arrays passed In, Out or InOut.
func (t *Task) ExportTo(stream uintptr, operands ...Arg) error {
	return t.handshake("ExportTo", stream, operands, true)
}

// ImportFrom makes rocsync's later ops on the operands wait, on the
// device, for all work enqueued on the foreign stream so far: what that
// work writes (Out, InOut) has it as its writer, what it reads (In) has it
// as a reader. It does not block the host.
func (t *Task) ImportFrom(stream uintptr, operands ...Arg) error {
	return t.handshake("ImportFrom", stream, operands, false)
}

func (t *Task) handshake(name string, foreign uintptr, operands []Arg, export bool) error {
	if err := t.check(name); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	j, ok := t.dev.drv.(driver.StreamJoiner)
	if !ok {
		return newErr(name, ErrUnavailable, "the %s backend cannot order foreign streams", t.dev.backend)
	}
	if len(operands) == 0 {
		return newErr(name, ErrInvalid, "no operands: name what the foreign work reads and writes")
	}
	if err := t.checkOperands(name, operands); err != nil {
		return err
	}
	accs := t.operands[:0]
	for i, a := range operands {
		if a.who == nil {
			return newErr(name, ErrInvalid, "Operand %d is a scalar: a handshake takes buffers and arrays", i)
		}
		if len(accs) == cap(accs) {
			return newErr(name, ErrInvalid, "more than %d operands", cap(accs))
		}
		accs = append(accs, access{a.buf, a.who, a.access})
	}
	call := func(library uintptr) error { return refusedForeign(j.JoinStreams(library, foreign)) }
	if export {
		call = func(library uintptr) error { return refusedForeign(j.JoinStreams(foreign, library)) }
	}
	op := &t.ops.call
	op.Call = call
	_, err := t.submit(name, op, accs)
	return err
}

// foreignStreamError is a handshake's join refused by the runtime (an
// event record on, or a wait by, the foreign stream: a bad handle, a
// stream of another device). Nothing of the op's was enqueued on the
// task's stream (a record of a pooled event there at most), so the op is
// an ErrInvalid error and its operands keep what they held.
type foreignStreamError struct{ err error }

func (e *foreignStreamError) Error() string { return "the foreign stream: " + e.err.Error() }
func (e *foreignStreamError) Unwrap() error { return e.err }

func refusedForeign(err error) error {
	if err == nil {
		return nil
	}
	return &foreignStreamError{err}
}

// The same handshake with HSA code outside rocsync (another runtime's
// queues, a library that takes hsa_signal_t), through signals instead of
// streams, on the task's HSA queue:
//
//   - ExportSignal returns an hsa_signal_t that reaches 0 once the work
//     the operands' accesses must follow has completed (a marker packet
//     with that completion signal, after the operands' writers, and for
//     Out and InOut their readers): a foreign consumer waits for it (a
//     barrier-AND packet on its queue, hsa_signal_wait_scacquire) before
//     it touches the operands;
//   - ImportSignal makes rocsync's later ops on the operands wait until a
//     foreign signal reads 0 (a barrier-AND packet on the task's queue):
//     the foreign work that completes it becomes the writer of Out and
//     InOut operands and a reader of In ones.
//
//	sig, _ := tk.ExportSignal(In(x), Out(y)) // 0 once x's writer, y's writer and readers completed
//	... foreign work waits for sig, reads x, writes y, completes done ...
//	tk.ImportSignal(done, In(x), Out(y))     // rocsync's next ops on x and y wait for done
//	tk.ReleaseSignal(sig)
//
// An exported signal belongs to the device until ReleaseSignal (or the
// device's Close); foreign code may wait on it but not change it. Both are
// ops on the task's kernel queue and never block the host. On CUDA, and
// under the Unified policy (no HSA queue), they are ErrUnavailable errors:
// use ExportTo and ImportFrom with a stream there.

// ExportSignal returns an HSA signal (an hsa_signal_t handle) that reaches
// 0, on the device, once the work the operands' accesses must follow has
// completed. Release it with ReleaseSignal.
func (t *Task) ExportSignal(operands ...Arg) (uint64, error) {
	const name = "ExportSignal"
	sf, err := t.signalFencer(name, operands)
	if err != nil {
		return 0, err
	}
	if err := t.begin(name); err != nil {
		return 0, err
	}
	defer t.end()
	h, err := sf.NewExternalSignal()
	if err != nil {
		return 0, &Error{Op: name, Kind: ErrUnavailable, Detail: "creating the signal", Err: err}
	}
	op := &t.ops.signal
	*op = driver.SignalOp{Signal: h}
	if err := t.submitHandshake(name, op, operands); err != nil {
		_ = sf.ReleaseExternalSignal(h)
		return 0, err
	}
	return h, nil
}

// ImportSignal makes rocsync's later ops on the operands wait, on the
// device, until the foreign HSA signal (an hsa_signal_t handle) reads 0:
// what the foreign work writes (Out, InOut) has it as its writer, what it
// reads (In) has it as a reader. It does not block the host. The handle
// must be a live signal: ROCr takes a handle for an address inside its
// signal object and reads the object there (SharedSignal::Convert,
// core/inc/signal.h), so a stale or made-up one is undefined behaviour,
// and no check rocsync could make first would be safe.
func (t *Task) ImportSignal(signal uint64, operands ...Arg) error {
	const name = "ImportSignal"
	if _, err := t.signalFencer(name, operands); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	if signal == 0 {
		return newErr(name, ErrInvalid, "the null signal")
	}
	op := &t.ops.signal
	*op = driver.SignalOp{Signal: signal, Import: true}
	return t.submitHandshake(name, op, operands)
}

// ReleaseSignal gives back a signal ExportSignal returned: the device may
// hand it out again once its marker packet has completed, so no foreign
// code may still wait on it. Releasing one twice, or any other signal, is
// an ErrInvalid error.
func (t *Task) ReleaseSignal(signal uint64) error {
	const name = "ReleaseSignal"
	if err := t.check(name); err != nil {
		return err
	}
	if err := t.begin(name); err != nil {
		return err
	}
	defer t.end()
	sf, ok := t.drv.(driver.SignalFencer)
	if !ok {
		return newErr(name, ErrUnavailable, "the %s backend has no HSA signals", t.dev.backend)
	}
	if err := sf.ReleaseExternalSignal(signal); err != nil {
		return &Error{Op: name, Kind: ErrInvalid, Err: err}
	}
	return nil
}

// signalFencer checks a signal handshake's task and operands.
func (t *Task) signalFencer(name string, operands []Arg) (driver.SignalFencer, error) {
	if err := t.check(name); err != nil {
		return nil, err
	}
	sf, ok := t.drv.(driver.SignalFencer)
	if !ok {
		return nil, newErr(name, ErrUnavailable, "the %s backend has no HSA signals: use ExportTo/ImportFrom with a stream", t.dev.backend)
	}
	if err := sf.ExternalSignals(); err != nil {
		return nil, &Error{Op: name, Kind: ErrUnavailable, Detail: "use ExportTo/ImportFrom with the HIP stream", Err: err}
	}
	if len(operands) == 0 {
		return nil, newErr(name, ErrInvalid, "no operands: name what the foreign work reads and writes")
	}
	return sf, t.checkOperands(name, operands)
}

// submitHandshake submits op with the operands' accesses.
func (t *Task) submitHandshake(name string, op *driver.SignalOp, operands []Arg) error {
	accs := t.operands[:0]
	for i, a := range operands {
		if a.who == nil {
			return newErr(name, ErrInvalid, "operand %d is a scalar: a handshake takes buffers and arrays", i)
		}
		if len(accs) == cap(accs) {
			return newErr(name, ErrInvalid, "more than %d operands", cap(accs))
		}
		accs = append(accs, access{a.buf, a.who, a.access})
	}
	// What an import's operands hold from now on was written by the
	// foreign work: outside the device's timelines.
	_, err := t.submitFrom(name, op, accs, op.Import)
	return err
}
