package main

import (
	"fmt"
	"unsafe"

	"github.com/rocsync/rocsync/hip"
	"github.com/rocsync/rocsync/hsa"
)

// hsaOps makes the first calls of an HSA program through rocsync's binding:
// hsa_init, the agents, an AQL queue on the first GPU, a barrier-AND
// packet whose completion signal the host waits for, hsa_shut_down. It
// prints one line per step and reports whether every step succeeded.
func hsaOps() bool {
	l, err := hsa.Open()
	if err != nil {
		fmt.Printf("hsa open=error: %v\n", err)
		return false
	}
	if err := l.Init(); err != nil {
		fmt.Printf("hsa init=error: %v\n", err)
		return false
	}
	defer func() { fmt.Printf("hsa shut_down=%v\n", errText(l.ShutDown())) }()
	agents, err := l.Agents()
	if err != nil {
		fmt.Printf("hsa agents=error: %v\n", err)
		return false
	}
	var gpu hsa.Agent
	found := false
	for _, a := range agents {
		name, _ := l.AgentInfoString(a, hsa.AgentInfoName)
		dev, _ := l.AgentInfoUint32(a, hsa.AgentInfoDevice)
		fmt.Printf("hsa agent=%s device_type=%d\n", name, dev)
		if hsa.DeviceType(dev) == hsa.DeviceTypeGPU && !found {
			gpu, found = a, true
		}
	}
	if !found {
		fmt.Println("hsa gpu=error: no GPU agent")
		return false
	}
	q, err := l.QueueCreate(gpu, 64, hsa.QueueTypeMulti, nil)
	if err != nil {
		fmt.Printf("hsa queue_create=error: %v\n", err)
		return false
	}
	defer func() { fmt.Printf("hsa queue_destroy=%v\n", errText(l.QueueDestroy(q))) }()
	fmt.Printf("hsa queue_create=ok size=%d\n", q.Size)
	done, err := l.SignalCreate(1, nil)
	if err != nil {
		fmt.Printf("hsa signal_create=error: %v\n", err)
		return false
	}
	defer l.SignalDestroy(done)
	idx := l.QueueAddWriteIndexScacqScrel(q, 1)
	slot := hsa.Slot(q, idx)
	p := hsa.BarrierAndPacket{CompletionSignal: done}
	p.EncodeBody(slot)
	hsa.PublishHeader(slot, uint32(hsa.Header(hsa.PacketTypeBarrierAnd, true, hsa.FenceScopeSystem, hsa.FenceScopeSystem)))
	l.SignalStoreScrelease(q.Doorbell, int64(idx))
	v := l.SignalWaitScacquire(done, hsa.ConditionEq, 0, ^uint64(0), hsa.WaitStateBlocked)
	fmt.Printf("hsa barrier_wait=%d\n", v)
	return v == 0
}

// hipOps makes the first calls of a HIP program: hipInit,
// hipGetDeviceCount, hipMalloc, a round trip through hipMemcpy,
// hipStreamCreate, hipMemsetAsync and hipStreamSynchronize.
func hipOps() bool {
	l, err := hip.Open()
	if err != nil {
		fmt.Printf("hip open=error: %v\n", err)
		return false
	}
	if err := l.Init(); err != nil {
		fmt.Printf("hip init=error: %v\n", err)
		return false
	}
	n, err := l.DeviceCount()
	fmt.Printf("hip device_count=%d %v\n", n, errText(err))
	if err != nil || n == 0 {
		return false
	}
	const size = 4096
	p, err := l.Malloc(0, size)
	if err != nil {
		fmt.Printf("hip malloc=error: %v\n", err)
		return false
	}
	defer func() { fmt.Printf("hip free=%v\n", errText(l.Free(0, p))) }()
	in, out := make([]byte, size), make([]byte, size)
	for i := range in {
		in[i] = byte(i*31 + 7)
	}
	err1 := l.MemcpyHtoD(0, p, unsafe.Pointer(&in[0]), size)
	err2 := l.MemcpyDtoH(0, unsafe.Pointer(&out[0]), p, size)
	same := string(in) == string(out)
	fmt.Printf("hip memcpy=%v %v same=%v\n", errText(err1), errText(err2), same)
	s, err := l.StreamCreate(0, 0)
	if err != nil {
		fmt.Printf("hip stream_create=error: %v\n", err)
		return false
	}
	defer func() { fmt.Printf("hip stream_destroy=%v\n", errText(l.StreamDestroy(s))) }()
	err1 = l.MemsetAsync(p, 0x5a, size, s)
	err2 = l.StreamSynchronize(s)
	err3 := l.MemcpyDtoH(0, unsafe.Pointer(&out[0]), p, size)
	filled := true
	for _, b := range out {
		filled = filled && b == 0x5a
	}
	fmt.Printf("hip memset_sync=%v %v %v filled=%v\n", errText(err1), errText(err2), errText(err3), filled)
	return same && filled && err1 == nil && err2 == nil && err3 == nil
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + err.Error()
}
