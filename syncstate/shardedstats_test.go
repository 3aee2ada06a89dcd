package syncstate

import (
	"testing"
	"unsafe"
)

// A ShardedStats snapshot is the sum of its shards, and two shards never
// share a 64-byte line: at least a line lies between one shard's counters
// and the next one's, however the array is aligned.
func TestShardedStatsSumsShardsOnLinesOfTheirOwn(t *testing.T) {
	var s ShardedStats
	for i := range 3 * StatShards {
		Sinks{s.Shard(i)}.Dispatch()
		Sinks{s.Shard(i)}.Skipped(2)
		Sinks{s.Shard(i)}.HostWait(ReasonSync)
	}
	got := s.Snapshot()
	if got.Dispatches != 3*StatShards || got.SkippedWaits != 6*StatShards || got.HostWaitsFor(ReasonSync) != 3*StatShards {
		t.Errorf("snapshot %v, want every shard's counts summed", got)
	}
	if s.Shard(1) == s.Shard(2) || s.Shard(1) != s.Shard(1+StatShards) {
		t.Error("Shard(i) is not shard i modulo StatShards")
	}
	stride := uintptr(unsafe.Pointer(s.Shard(1))) - uintptr(unsafe.Pointer(s.Shard(0)))
	if gap := stride - unsafe.Sizeof(Stats{}); gap < 64 {
		t.Errorf("%d bytes between shards, want at least 64", gap)
	}
}
