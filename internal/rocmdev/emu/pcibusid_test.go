package emu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
)

// HIP 5.2.3 refuses hipDeviceAttributePciDomainID (measured over the
// simulated driver) and reports the domain through hipDeviceGetPCIBusId;
// later releases answer both.
func TestPCIDomainPerHIPRelease(t *testing.T) {
	for _, tc := range []struct {
		version   int
		attribute bool
	}{{50_221_153, false}, {60_200_000, true}} {
		h := New(Options{HIPVersion: tc.version}).HIP()
		id, err := h.DevicePCIBusID(0)
		require.NoError(t, err)
		require.Regexp(t, `^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0$`, id)
		_, err = h.DeviceAttribute(0, hip.DeviceAttributePciDomainID)
		if tc.attribute {
			require.NoError(t, err, "HIP %d", tc.version)
		} else {
			require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidValue}, "HIP %d", tc.version)
		}
	}
	_, err := New(Options{}).HIP().DevicePCIBusID(5)
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidDevice})
}

// Partitions share a PCI bus and device and differ in the function, which
// HSA's BDFID carries and hipDeviceGetPCIBusId prints from HIP 6.2 on.
func TestPartitionPCIFunctions(t *testing.T) {
	for _, tc := range []struct {
		version int
		want    []string
	}{
		{60_100_000, []string{"0000:03:00.0", "0000:03:00.0", "0000:23:00.0"}},
		{60_200_000, []string{"0000:03:00.0", "0000:03:00.1", "0000:23:00.0"}},
	} {
		h := New(Options{Devices: 3, Partitions: 2, HIPVersion: tc.version}).HIP()
		for d, want := range tc.want {
			id, err := h.DevicePCIBusID(d)
			require.NoError(t, err)
			require.Equal(t, want, id, "HIP %d device %d", tc.version, d)
		}
	}
	m := New(Options{Devices: 2, Partitions: 2})
	require.NoError(t, m.HSA().Init())
	for d, want := range []uint32{0x03 << 8, 0x03<<8 | 1} {
		got, err := m.HSA().AgentInfoUint32(gpuAgent(d), hsa.AgentInfoBDFID)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}
