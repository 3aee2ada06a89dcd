package rocsync

import (
	"go/format"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's usage example is gofmt-clean Go.
func TestReadmeUsageIsGofmtClean(t *testing.T) {
	src := readmeBlock(t, "## Usage", "```go\n")
	formatted, err := format.Source([]byte(src))
	require.NoError(t, err, "the example parses")
	require.Equal(t, string(formatted), src, "gofmt would change the README's example")
}

// readmeBlock returns the first code block opened by fence after heading.
func readmeBlock(t *testing.T, heading, fence string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "no %q section", heading)
	s = s[i:]
	j := strings.Index(s, fence)
	require.GreaterOrEqual(t, j, 0, "no %q block under %q", fence, heading)
	s = s[j+len(fence):]
	k := strings.Index(s, "```\n")
	require.GreaterOrEqual(t, k, 0)
	return s[:k]
}
