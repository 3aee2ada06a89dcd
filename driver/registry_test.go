package driver

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

var runs atomic.Int64

type fakeDriver struct{ fam *Family }

func (d fakeDriver) Open(OpenConfig) (*Family, error) { return d.fam, nil }

// A registered driver opens by its name; an unknown name is
// ErrNotRegistered; registering a name twice, or a nil driver, panics.
func TestRegisterOpen(t *testing.T) {
	name := fmt.Sprintf("registry-test-%d", runs.Add(1)) // the registry is the process's
	fam := &Family{System: "sys"}
	Register(name, fakeDriver{fam})
	require.Contains(t, Drivers(), name)
	got, err := Open(name, OpenConfig{})
	require.NoError(t, err)
	require.Same(t, fam, got)
	_, err = Open("registry-test-absent", OpenConfig{})
	require.ErrorIs(t, err, ErrNotRegistered)
	require.ErrorContains(t, err, `"registry-test-absent"`)
	require.Panics(t, func() { Register(name, fakeDriver{}) })
	require.Panics(t, func() { Register(name+"-nil", nil) })
}

// WithKind adds a kind for errors.Is and keeps the error's text and
// chain.
func TestWithKind(t *testing.T) {
	base := errors.New("hipErrorOutOfMemory")
	err := WithKind(base, ErrOutOfMemory)
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.ErrorIs(t, err, base)
	require.NotErrorIs(t, err, ErrNoDevice)
	require.Equal(t, base.Error(), err.Error())
	require.NoError(t, WithKind(nil, ErrOutOfMemory))
}
