package userkernel_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rocsync/rocsync/internal/hiptest"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

func hipKernel(t *testing.T, v kernels.CodeObjectVersion, name string) (*userkernel.Signature, *kernels.KernelMeta) {
	t.Helper()
	co, err := hiptest.Build("gfx90a", v)
	if errors.Is(err, hiptest.ErrNoToolchain) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	img, err := userkernel.ReadCodeObject(co)
	if err != nil {
		t.Fatal(err)
	}
	k, err := img.Kernel(name)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := kernels.ReadMetadata(co)
	if err != nil {
		t.Fatal(err)
	}
	km, _ := meta.Kernel(name)
	return k, km
}

func hiddenOffset(t *testing.T, km *kernels.KernelMeta, kind string) uint32 {
	t.Helper()
	for _, a := range km.Args {
		if a.ValueKind == kind {
			return a.Offset
		}
	}
	t.Fatalf("%s lists no %s", km.Name, kind)
	return 0
}

// Pack writes the hidden arguments of a v5 kernel in the layout its
// metadata gives, and ObservedGeometry reads them back as the kernel does;
// a hidden argument that does not describe the dispatch is ErrHiddenArgs.
func TestObservedGeometryReadsHiddenArgs(t *testing.T) {
	k, km := hipKernel(t, kernels.CodeObjectV5, "geom")
	if k.ArgsSize != 264 || k.ExplicitArgsSize != 8 {
		t.Fatalf("geom: %d-byte kernarg segment, %d explicit", k.ArgsSize, k.ExplicitArgsSize)
	}
	g := userkernel.Grid1D(1000, 64)
	packet := userkernel.Geometry{Dims: 3, Grid: [3]uint32{1000, 1, 1}, Workgroup: [3]uint32{64, 1, 1}}
	pack := func() []byte {
		block := make([]byte, k.ArgsSize)
		for i := range block {
			block[i] = 0xee // Pack must overwrite every byte
		}
		if err := k.Pack(block, g, []userkernel.Arg{userkernel.Buffer(0x1000, userkernel.Write)}); err != nil {
			t.Fatal(err)
		}
		return block
	}
	block := pack()
	le := binary.LittleEndian
	for kind, want := range map[string]uint64{
		"hidden_block_count_x": 15, "hidden_block_count_y": 1, "hidden_block_count_z": 1,
		"hidden_group_size_x": 64, "hidden_group_size_y": 1, "hidden_group_size_z": 1,
		"hidden_remainder_x": 40, "hidden_remainder_y": 0, "hidden_remainder_z": 0,
		"hidden_global_offset_x": 0, "hidden_grid_dims": 1,
	} {
		off := hiddenOffset(t, km, kind)
		var got uint64
		switch kind {
		case "hidden_block_count_x", "hidden_block_count_y", "hidden_block_count_z":
			got = uint64(le.Uint32(block[off:]))
		case "hidden_global_offset_x":
			got = le.Uint64(block[off:])
		default:
			got = uint64(le.Uint16(block[off:]))
		}
		if got != want {
			t.Errorf("Pack: %s at %d = %d, want %d", kind, off, got, want)
		}
	}
	obs, err := k.ObservedGeometry(packet, block)
	if err != nil || obs != g {
		t.Fatalf("ObservedGeometry = %+v, %v; want %+v", obs, err, g)
	}

	for _, tc := range []struct {
		kind  string
		size  int
		value uint64
	}{
		{"hidden_group_size_x", 2, 32},
		{"hidden_block_count_x", 4, 16},
		{"hidden_remainder_x", 2, 0},
		{"hidden_global_offset_x", 8, 5},
		{"hidden_grid_dims", 2, 0},
	} {
		b := pack()
		off := hiddenOffset(t, km, tc.kind)
		switch tc.size {
		case 2:
			le.PutUint16(b[off:], uint16(tc.value))
		case 4:
			le.PutUint32(b[off:], uint32(tc.value))
		default:
			le.PutUint64(b[off:], tc.value)
		}
		_, err := k.ObservedGeometry(packet, b)
		var he *userkernel.HiddenArgError
		if !errors.Is(err, userkernel.ErrHiddenArgs) || !errors.As(err, &he) || he.ValueKind != tc.kind || he.Got != tc.value {
			t.Errorf("%s = %d: ObservedGeometry error %v", tc.kind, tc.value, err)
		}
	}
	// A packet the arguments were not packed for: a whole last workgroup.
	whole := packet
	whole.Grid[0] = 1024
	if _, err := k.ObservedGeometry(whole, block); !errors.Is(err, userkernel.ErrHiddenArgs) {
		t.Errorf("packet of 1024 work-items with arguments for 1000: %v", err)
	}
	// grid_dims 1 while the packet has a second dimension.
	tall := packet
	tall.Grid[1], tall.Workgroup[1] = 2, 2
	if _, err := k.ObservedGeometry(tall, block); !errors.Is(err, userkernel.ErrHiddenArgs) {
		t.Errorf("grid_dims 1 on a 2-D packet: %v", err)
	}
	// A reference does not run on wrong hidden arguments.
	refs := &userkernel.References{}
	ran := false
	if err := refs.Register("geom", func(userkernel.Geometry, []userkernel.Arg, userkernel.Memory) error { ran = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := refs.Run(k, whole, block, nil); !errors.Is(err, userkernel.ErrHiddenArgs) || ran {
		t.Errorf("References.Run on wrong hidden arguments: %v (ran %v)", err, ran)
	}
}

// Code object v4 lists the global offsets (and hidden_none) after the
// explicit arguments when a kernel reads the implicit-argument pointer:
// Pack writes 0, and a non-zero offset is refused; the sizes come from the
// packet.
func TestObservedGeometryV4GlobalOffsets(t *testing.T) {
	k, km := hipKernel(t, kernels.CodeObjectV4, "offs")
	if k.ArgsSize != 64 || k.ExplicitArgsSize != 8 {
		t.Fatalf("offs v4: %d-byte kernarg segment, %d explicit", k.ArgsSize, k.ExplicitArgsSize)
	}
	block := make([]byte, k.ArgsSize)
	for i := range block {
		block[i] = 0xee
	}
	g := userkernel.Grid1D(1000, 64)
	if err := k.Pack(block, g, []userkernel.Arg{userkernel.Buffer(0x1000, userkernel.Write)}); err != nil {
		t.Fatal(err)
	}
	for i, b := range block[8:] {
		if b != 0 {
			t.Fatalf("Pack left byte %d of the hidden area %#x", 8+i, b)
		}
	}
	packet := userkernel.Geometry{Dims: 3, Grid: [3]uint32{1000, 1, 1}, Workgroup: [3]uint32{64, 1, 1}}
	if obs, err := k.ObservedGeometry(packet, block); err != nil || obs.Grid != packet.Grid || obs.Workgroup != packet.Workgroup {
		t.Fatalf("ObservedGeometry = %+v, %v", obs, err)
	}
	binary.LittleEndian.PutUint64(block[hiddenOffset(t, km, "hidden_global_offset_y"):], 7)
	if _, err := k.ObservedGeometry(packet, block); !errors.Is(err, userkernel.ErrHiddenArgs) {
		t.Errorf("global offset 7: %v", err)
	}
}
