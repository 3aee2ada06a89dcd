package kernels

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

func TestLayoutIsContiguous(t *testing.T) {
	for _, dt := range AllDTypes() {
		end := uint32(0)
		for _, arg := range Layout {
			size := arg.Size(dt)
			if arg.Offset%size != 0 {
				t.Errorf("%v: %s at %d is not aligned to its size %d", dt, arg.Name, arg.Offset, size)
			}
			if arg.Offset < end {
				t.Errorf("%v: %s at %d overlaps the previous argument (ends at %d)", dt, arg.Name, arg.Offset, end)
			}
			end = arg.Offset + size
		}
		if end != KernargSize {
			t.Errorf("%v: arguments end at %d, KernargSize is %d", dt, end, KernargSize)
		}
	}
}

func TestArgsRoundTrip(t *testing.T) {
	cases := []Args{
		{},
		{Out: 0x7fff_0000_1000, A: 0x7fff_0000_2000, B: 0x7fff_0000_3000, Alpha: 2.5, N: 1 << 20},
		{Out: math.MaxUint64, A: 1, B: 0, Alpha: math.Copysign(0, -1), N: math.MaxUint64},
		{Out: 8, Alpha: math.Inf(-1), N: 3},
		{Alpha: 1e-300}, // f32: flushes to 0 through float32, exact in f64
	}
	for _, dt := range AllDTypes() {
		for _, args := range cases {
			buf := bytes.Repeat([]byte{0xAA}, KernargSize+8) // stale bytes must not survive
			args.Encode(buf, dt)
			if !bytes.Equal(buf[KernargSize:], bytes.Repeat([]byte{0xAA}, 8)) {
				t.Errorf("%v: Encode wrote past KernargSize", dt)
			}
			got := DecodeArgs(buf, dt)
			want := args
			if dt == F32 {
				want.Alpha = float64(float32(args.Alpha))
				if pad := buf[OffsetAlpha+4 : OffsetN]; !bytes.Equal(pad, make([]byte, 4)) {
					t.Errorf("f32 alpha padding = %x, want zeros", pad)
				}
			}
			if got != want {
				t.Errorf("%v: DecodeArgs(Encode(%+v)) = %+v, want %+v", dt, args, got, want)
			}
			if math.Signbit(got.Alpha) != math.Signbit(want.Alpha) {
				t.Errorf("%v: alpha sign lost: %v -> %v", dt, args.Alpha, got.Alpha)
			}
		}
	}
}

func TestArgsEncodeNaNAlpha(t *testing.T) {
	var buf [KernargSize]byte
	for _, dt := range AllDTypes() {
		(&Args{Alpha: math.NaN()}).Encode(buf[:], dt)
		if got := DecodeArgs(buf[:], dt).Alpha; !math.IsNaN(got) {
			t.Errorf("%v: NaN alpha decoded as %v", dt, got)
		}
	}
}

func TestArgsEncodeLittleEndian(t *testing.T) {
	var buf [KernargSize]byte
	args := Args{Out: 0x0102030405060708, A: 0x1112131415161718, B: 0x2122232425262728, Alpha: 1.5, N: 0x3132333435363738}
	args.Encode(buf[:], F32)
	want := []byte{
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
		0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,
		0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0x00, // 1.5f = 0x3fc00000
		0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31,
	}
	if !bytes.Equal(buf[:], want) {
		t.Errorf("Encode(F32) =\n%x\nwant\n%x", buf[:], want)
	}
	args.Encode(buf[:], F64)
	if got := binary.LittleEndian.Uint64(buf[OffsetAlpha:]); got != math.Float64bits(1.5) {
		t.Errorf("Encode(F64) alpha bits = %#x", got)
	}
}

func TestArgsEncodeDoesNotAllocate(t *testing.T) {
	buf := make([]byte, KernargSize)
	args := &Args{Out: 1, A: 2, B: 3, Alpha: 4, N: 5}
	for _, dt := range AllDTypes() {
		if n := testing.AllocsPerRun(100, func() { args.Encode(buf, dt) }); n != 0 {
			t.Errorf("%v: Encode allocates %v times per call", dt, n)
		}
	}
}

func TestArgsEncodePanicsOnShortBuffer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Encode into a 39-byte buffer did not panic")
		}
	}()
	(&Args{}).Encode(make([]byte, KernargSize-1), F32)
}

func BenchmarkArgsEncode(b *testing.B) {
	buf := make([]byte, KernargSize)
	args := &Args{Out: 1, A: 2, B: 3, Alpha: 4, N: 5}
	for b.Loop() {
		args.Encode(buf, F32)
	}
}
