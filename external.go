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
	call := func(library uintptr) error { return j.JoinStreams(library, foreign) }
	if export {
		call = func(library uintptr) error { return j.JoinStreams(foreign, library) }
	}
	t.op.Kind, t.op.Lane, t.op.Call = driver.LibraryCall, driver.LaneLibrary, call
	_, err := t.submit(name, accs)
	return err
}
