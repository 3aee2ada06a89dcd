package main

import (
	"strings"
	"testing"
)

// A trace renders with every '<' escaped, so no string in it can end the
// script element or change how the page parses ("</script", "<!--");
// JSON that is not a trace is refused (it rendered a page whose script
// threw).
func TestRender(t *testing.T) {
	page, err := render([]byte(`{"traceEvents":[{"name":"<!--<script></script>","ph":"X","ts":1,"dur":1,"pid":1,"tid":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	script := page[strings.Index(page, "const trace = "):]
	script = script[:strings.Index(script, "\n")]
	if strings.Contains(script, "<") || !strings.Contains(script, `\u003c!--\u003cscript>`) {
		t.Errorf("the trace's line: %s", script)
	}
	if _, err := render([]byte(`[{"name":"x","ph":"i","ts":1,"pid":1,"tid":1}]`)); err != nil {
		t.Errorf("an array of events: %v", err)
	}
	for _, bad := range []string{`{}`, `null`, `42`, `"x"`, `{"traceEvents":3}`, `[1,`, ``} {
		if _, err := render([]byte(bad)); err == nil {
			t.Errorf("render(%q) accepted", bad)
		}
	}
}
