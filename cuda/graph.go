package cuda

// CUDA graphs by stream capture: the work enqueued on a capturing stream
// is recorded into a graph instead of run; an instantiated graph runs it
// all with one launch.

// StreamCaptureModeRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED: the capture
// may be ended from another OS thread than the one that began it (a
// goroutine may move between calls), and no call elsewhere is refused
// because of it.
const StreamCaptureModeRelaxed = 2

// StreamBeginCapture is cuStreamBeginCapture_v2(s, mode).
func (c *Ctx) StreamBeginCapture(s Stream, mode int) error {
	return c.lib.invoke(c, symStreamBeginCapture, uintptr(s), uintptr(mode))
}

// StreamEndCapture is cuStreamEndCapture: the graph of what was captured
// on s (an error when the capture was invalidated).
func (c *Ctx) StreamEndCapture(s Stream) (Graph, error) {
	b := blocks.Get()
	defer blocks.Put(b)
	*b.U64(0) = 0
	r, failed := c.lib.callOn(b, c, symStreamEndCapture, []uintptr{uintptr(s), b.Word(0)})
	if err := c.lib.check(failed, r); err != nil {
		return 0, err
	}
	return Graph(*b.U64(0)), nil
}

// GraphInstantiate is cuGraphInstantiateWithFlags(&exec, g, 0).
func (c *Ctx) GraphInstantiate(g Graph) (GraphExec, error) {
	v, err := c.lib.outInvoke(c, symGraphInstantiate, uintptr(g), 0)
	return GraphExec(v), err
}

// GraphLaunch is cuGraphLaunch(exec, s): the whole graph, in stream order.
func (c *Ctx) GraphLaunch(e GraphExec, s Stream) error {
	return c.lib.invoke(c, symGraphLaunch, uintptr(e), uintptr(s))
}

// GraphDestroy is cuGraphDestroy; an instantiated graph does not need it.
func (c *Ctx) GraphDestroy(g Graph) error { return c.lib.invoke(c, symGraphDestroy, uintptr(g)) }

// GraphExecDestroy is cuGraphExecDestroy.
func (c *Ctx) GraphExecDestroy(e GraphExec) error {
	return c.lib.invoke(c, symGraphExecDestroy, uintptr(e))
}
