package hiptest

import (
	"errors"
	"testing"

	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/userkernel"
)

// The kernels' metadata, as clang-22 lays it out: v4 reads the grid from
// the dispatch packet (no hidden arguments, 12-byte kernarg segment for
// scale), v5 and v6 reserve the 256-byte implicit area (272 bytes).
func TestBuiltKernels(t *testing.T) {
	for _, tc := range []struct {
		v                 kernels.CodeObjectVersion
		scale, noargs     uint32
		scaleHidden, offs int
	}{
		{kernels.CodeObjectV4, 12, 0, 0, 7},
		{kernels.CodeObjectV5, 272, 256, 13, 13},
		{kernels.CodeObjectV6, 272, 256, 13, 13},
	} {
		co, err := Build("gfx90a", tc.v)
		if errors.Is(err, ErrNoToolchain) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if v, err := kernels.ReadCodeObjectVersion(co); err != nil || v != tc.v {
			t.Fatalf("%s: built %v, %v", tc.v, v, err)
		}
		img, err := userkernel.ReadCodeObject(co)
		if err != nil {
			t.Fatal(err)
		}
		meta, err := kernels.ReadMetadata(co)
		if err != nil {
			t.Fatal(err)
		}
		hidden := func(name string) int {
			k, _ := meta.Kernel(name)
			n := 0
			for _, a := range k.Args {
				if len(a.ValueKind) > 7 && a.ValueKind[:7] == "hidden_" {
					n++
				}
			}
			return n
		}
		scale, err := img.Kernel("scale")
		if err != nil {
			t.Fatal(err)
		}
		noargs, err := img.Kernel("noargs")
		if err != nil {
			t.Fatal(err)
		}
		if scale.ArgsSize != tc.scale || scale.ExplicitArgsSize != 12 || noargs.ArgsSize != tc.noargs || noargs.ExplicitArgsSize != 0 ||
			hidden("scale") != tc.scaleHidden || hidden("offs") != tc.offs {
			t.Errorf("%s: scale %d/%d bytes, noargs %d/%d, hidden scale %d offs %d", tc.v, scale.ArgsSize, scale.ExplicitArgsSize,
				noargs.ArgsSize, noargs.ExplicitArgsSize, hidden("scale"), hidden("offs"))
		}
	}
}
