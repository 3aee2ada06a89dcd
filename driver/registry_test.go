package driver

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

type fakeDriver struct{ fam *Family }

func (d fakeDriver) Open(OpenConfig) (*Family, error) { return d.fam, nil }

// A registered driver opens by its name; an unknown name is
// ErrNotRegistered; registering a name twice, or a nil driver, panics.
func TestRegisterOpen(t *testing.T) {
	fam := &Family{System: "sys"}
	Register("registry-test", fakeDriver{fam})
	require.Contains(t, Drivers(), "registry-test")
	got, err := Open("registry-test", OpenConfig{})
	require.NoError(t, err)
	require.Same(t, fam, got)
	_, err = Open("registry-test-absent", OpenConfig{})
	require.ErrorIs(t, err, ErrNotRegistered)
	require.ErrorContains(t, err, `"registry-test-absent"`)
	require.Panics(t, func() { Register("registry-test", fakeDriver{}) })
	require.Panics(t, func() { Register("registry-test-nil", nil) })
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
