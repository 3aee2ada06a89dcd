package syncstate

import "testing"

// BenchmarkBeginCommit: the sync core's per-op work for x = f(x, y) on one
// timeline (two skipped fences), and across two timelines of one domain
// (a device wait), with no observer: what every op pays.
func BenchmarkBeginCommit(b *testing.B) {
	for _, cross := range []bool{false, true} {
		name := "SameTimeline"
		if cross {
			name = "DeviceWait"
		}
		b.Run(name, func(b *testing.B) {
			q1, q2 := &fakeTL{name: "q1"}, &fakeTL{name: "q2"}
			tls := [2]*fakeTL{q1, q2}
			e := &Engine{Policy: DeviceSide}
			var st Stats
			sinks := Sinks{&st}
			x, y := NewState(), NewState()
			tickets := [2]uint64{}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				k := 0
				if cross {
					k = i & 1
				}
				tl := tls[k]
				tl.devWaits = tl.devWaits[:0]
				var op Op
				op.Read(y)
				op.Write(x)
				if err := op.Begin(e, tl, sinks); err != nil {
					b.Fatal(err)
				}
				tickets[k]++
				if err := op.Commit(tickets[k], sinks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
