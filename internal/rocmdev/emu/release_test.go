package emu

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/kernels"
)

func codeObject(t *testing.T, isa string, v kernels.CodeObjectVersion) []byte {
	t.Helper()
	code, err := kernels.CodeObjectFor(isa, v)
	require.NoError(t, err)
	return code
}

// asV6 relabels a v5 object as v6 (EI_ABIVERSION 4): the loaders decide by
// that byte first, which is all these tests need.
func asV6(code []byte) []byte {
	b := bytes.Clone(code)
	b[8] = kernels.CodeObjectV6.ABIVersion()
	return b
}

// HIP 5.2.3 refuses the v5 files with hipErrorSharedObjectInitFailed (seen on
// the real library over the simulated driver); the emulator must too.
func TestEmulatedHIPRefusesV5OnHIP52(t *testing.T) {
	m := New(Options{HIPVersion: 50_221_153})
	h := m.HIP()
	_, err := h.ModuleLoadData(0, codeObject(t, "gfx90a", kernels.CodeObjectV5))
	require.Error(t, err)
	require.True(t, errors.Is(err, &hip.Error{Code: hip.ErrorSharedObjectInitFailed}), "error %v", err)
	var he *hip.Error
	require.True(t, errors.As(err, &he))
	require.Equal(t, "hipErrorSharedObjectInitFailed", he.Name)
	require.Contains(t, err.Error(), "COMGR failed to get code object ISA name")

	mod, err := h.ModuleLoadData(0, codeObject(t, "gfx90a", kernels.CodeObjectV4))
	require.NoError(t, err)
	_, err = h.ModuleGetFunction(mod, kernels.Mul.KernelName(kernels.F32))
	require.NoError(t, err)
	v, err := h.RuntimeVersion()
	require.NoError(t, err)
	require.Equal(t, 50_221_153, v)
}

func TestEmulatedHIPCodeObjectVersions(t *testing.T) {
	v5 := codeObject(t, "gfx90a", kernels.CodeObjectV5)
	for _, tc := range []struct {
		hipVersion int
		v5, v6     bool
	}{
		{50_000_000, false, false},
		{50_221_153, false, false},
		{50_300_000, true, false}, // comgr 5.3 names v5
		{60_100_000, true, false},
		{60_200_000, true, true},
		{0, true, true}, // the default models 6.2
	} {
		h := New(Options{HIPVersion: tc.hipVersion}).HIP()
		for v, want := range map[string]bool{"v5": tc.v5, "v6": tc.v6} {
			code := v5
			if v == "v6" {
				code = asV6(v5)
			}
			_, err := h.ModuleLoadData(0, code)
			if want {
				require.NoError(t, err, "HIP %d %s", tc.hipVersion, v)
			} else {
				require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorSharedObjectInitFailed}, "HIP %d %s", tc.hipVersion, v)
			}
		}
		_, err := h.ModuleLoadData(0, codeObject(t, "gfx90a", kernels.CodeObjectV4))
		require.NoError(t, err, "HIP %d v4", tc.hipVersion)
	}
	_, err := New(Options{}).HIP().ModuleLoadData(0, []byte("not a code object"))
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidImage})
}

// ROCr's loader takes major versions 1..4 in 5.0-5.1, 1..5 in 5.2-6.1 and
// 1..6 from 6.2 (src/loader/executable.cpp).
func TestEmulatedROCrCodeObjectVersions(t *testing.T) {
	v5 := codeObject(t, "gfx90a", kernels.CodeObjectV5)
	for _, tc := range []struct {
		hipVersion int
		build      string
		v5, v6     bool
	}{
		{50_100_000, "1.5.0-emulated", false, false},
		{50_221_153, "1.5.0-emulated", true, false},
		{50_300_000, "1.7.0-emulated", true, false},
		{60_100_000, "1.13.0-emulated", true, false},
		{60_200_000, "1.14.0-emulated", true, true},
		{0, "1.14.0-emulated", true, true},
	} {
		m := New(Options{HIPVersion: tc.hipVersion})
		h := m.HSA()
		require.NoError(t, h.Init())
		build, err := h.BuildVersion()
		require.NoError(t, err)
		require.Equal(t, tc.build, build)
		load := func(code []byte) error {
			rd, err := h.CodeObjectReaderCreateFromMemory(code)
			require.NoError(t, err)
			exe, err := h.ExecutableCreateAlt(hsa.ProfileFull, 0)
			require.NoError(t, err)
			return h.ExecutableLoadAgentCodeObject(exe, gpuAgent(0), rd)
		}
		for v, want := range map[string]bool{"v5": tc.v5, "v6": tc.v6} {
			code := v5
			if v == "v6" {
				code = asV6(v5)
			}
			err := load(code)
			if want {
				require.NoError(t, err, "ROCm %d %s", tc.hipVersion, v)
			} else {
				require.ErrorIs(t, err, &hsa.Error{Status: hsa.StatusErrorInvalidCodeObject}, "ROCm %d %s", tc.hipVersion, v)
				require.Contains(t, err.Error(), "unsupported code object version")
			}
		}
		require.NoError(t, load(codeObject(t, "gfx90a", kernels.CodeObjectV4)), "ROCm %d v4", tc.hipVersion)
	}
}

// ROCr loads a generic processor's code object on a member of its family
// once its ISA registry knows generic processors (modelled from ROCm 6.4),
// never on a processor outside the family; HIP loads modules through the
// same loader.
func TestEmulatedGenericCodeObjects(t *testing.T) {
	gfx11 := codeObject(t, "gfx11-generic", kernels.CodeObjectV6)
	gfx9 := codeObject(t, "gfx9-generic", kernels.CodeObjectV6)
	for _, tc := range []struct {
		isa        string
		hipVersion int
		code       []byte
		loads      bool
	}{
		{"gfx1152", 60_400_000, gfx11, true},
		{"gfx1102", 70_000_000, gfx11, true},
		{"gfx1152", 60_200_000, gfx11, false}, // v6 loads, generic ISAs unknown
		{"gfx1152", 60_300_000, gfx11, false},
		{"gfx1030", 60_400_000, gfx11, false}, // another family
		{"gfx906", 60_400_000, gfx9, true},
		{"gfx90a", 60_400_000, gfx9, false}, // gfx90a belongs to no generic family
		{"gfx908", 60_400_000, gfx9, false},
	} {
		m := New(Options{ISA: tc.isa, HIPVersion: tc.hipVersion})
		h := m.HSA()
		require.NoError(t, h.Init())
		rd, err := h.CodeObjectReaderCreateFromMemory(tc.code)
		require.NoError(t, err)
		exe, err := h.ExecutableCreateAlt(hsa.ProfileFull, 0)
		require.NoError(t, err)
		err = h.ExecutableLoadAgentCodeObject(exe, gpuAgent(0), rd)
		_, hipErr := m.HIP().ModuleLoadData(0, tc.code)
		if tc.loads {
			require.NoError(t, err, "%s ROCm %d", tc.isa, tc.hipVersion)
			require.NoError(t, hipErr, "%s ROCm %d", tc.isa, tc.hipVersion)
		} else {
			require.ErrorIs(t, err, &hsa.Error{Status: hsa.StatusErrorInvalidISA}, "%s ROCm %d", tc.isa, tc.hipVersion)
			require.ErrorIs(t, hipErr, &hip.Error{Code: hip.ErrorInvalidImage}, "%s ROCm %d", tc.isa, tc.hipVersion)
		}
	}
}
