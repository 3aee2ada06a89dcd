package rocsync

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every exported method of every handle type, called on a nil handle with
// zero arguments, returns (a typed error or a zero value) instead of
// panicking: a failed Open, Download or NewTask hands the caller a nil
// handle, and code that ignores the error, as the README's does, calls
// it. Methods added later are covered as they come.
func TestEveryMethodOfANilHandleReturns(t *testing.T) {
	ctxType := reflect.TypeFor[context.Context]()
	for _, h := range []any{(*Device)(nil), (*Task)(nil), (*Array)(nil), (*Buffer)(nil), (*Recording)(nil),
		(*Pending)(nil), (*Communicator)(nil), (*Trace)(nil), (*Kernel)(nil), (*HostAccess)(nil)} {
		v := reflect.ValueOf(h)
		for i := range v.NumMethod() {
			m := v.Type().Method(i)
			mt := v.Method(i).Type()
			var args []reflect.Value
			for j := range mt.NumIn() {
				if mt.IsVariadic() && j == mt.NumIn()-1 {
					break
				}
				if mt.In(j) == ctxType {
					args = append(args, reflect.ValueOf(context.Background()))
					continue
				}
				args = append(args, reflect.Zero(mt.In(j)))
			}
			name := fmt.Sprintf("%T.%s", h, m.Name)
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s panics: %v", name, r)
					}
				}()
				out := v.Method(i).Call(args)
				// A method that returns an error says why.
				if n := len(out); n > 0 && mt.Out(n-1) == reflect.TypeFor[error]() && !out[n-1].IsNil() {
					var e *Error
					require.ErrorAs(t, out[n-1].Interface().(error), &e, name)
				}
			}()
		}
	}
}

// A refused Download returns a nil Pending: Wait says so with ErrInvalid,
// Release does nothing, and Then hands fn the same error on a goroutine
// of its own instead of panicking there, where no caller could recover.
func TestNilPendingFromARefusedDownload(t *testing.T) {
	d := openPlain(t, DeviceSide)
	x, err := d.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	require.NoError(t, err)
	p, err := d.DefaultTask().DownloadFloat32(x, make([]float32, 3))
	require.ErrorIs(t, err, ErrShape)
	require.Nil(t, p)
	require.ErrorIs(t, p.Wait(context.Background()), ErrInvalid)
	p.Release()
	got := make(chan error, 1)
	p.Then(func(err error) { got <- err })
	require.ErrorIs(t, <-got, ErrInvalid)
	p.Then(nil) // drops the result

	// A nil fn on a real download: the download still completes.
	dst := make([]float32, 4)
	p, err = d.DefaultTask().DownloadFloat32(x, dst)
	require.NoError(t, err)
	p.Then(nil)
	require.NoError(t, d.Synchronize())
}
