package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A minimal MessagePack decoder, enough for the AMDGPU code object metadata
// note (which is a msgpack map), so the package needs no dependency. It
// decodes into plain Go values:
//
//	nil, bool, int64 (signed encodings), uint64 (unsigned encodings and
//	positive fixints), float64 (float32 is widened), string, []byte (bin),
//	[]any (array), map[string]any (map; keys must be strings)
//
// Extension types are rejected. The input is untrusted: every length is
// checked against the bytes that remain before anything is allocated, and
// nesting is limited, so malformed input gives an error, never a panic or a
// huge allocation.

// maxMsgpackDepth bounds nesting; AMDGPU metadata nests four levels deep.
const maxMsgpackDepth = 32

var errMsgpackTruncated = errors.New("msgpack: truncated input")

type msgpackDecoder struct {
	data  []byte
	pos   int
	depth int
}

// decodeMsgpack decodes the single value in data. Trailing NUL bytes (note
// padding) are allowed; anything else after the value is an error.
func decodeMsgpack(data []byte) (any, error) {
	d := msgpackDecoder{data: data}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	for _, c := range data[d.pos:] {
		if c != 0 {
			return nil, fmt.Errorf("msgpack: %d unexpected bytes after the value", len(data)-d.pos)
		}
	}
	return v, nil
}

func (d *msgpackDecoder) take(n uint64) ([]byte, error) {
	if n > uint64(len(d.data)-d.pos) {
		return nil, errMsgpackTruncated
	}
	b := d.data[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return b, nil
}

func (d *msgpackDecoder) uint(size int) (uint64, error) {
	b, err := d.take(uint64(size))
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	default:
		return binary.BigEndian.Uint64(b), nil
	}
}

func (d *msgpackDecoder) value() (any, error) {
	tagBytes, err := d.take(1)
	if err != nil {
		return nil, err
	}
	tag := tagBytes[0]
	switch {
	case tag <= 0x7f: // positive fixint
		return uint64(tag), nil
	case tag >= 0xe0: // negative fixint
		return int64(int8(tag)), nil
	case tag&0xf0 == 0x80: // fixmap
		return d.mapValue(uint64(tag & 0x0f))
	case tag&0xf0 == 0x90: // fixarray
		return d.array(uint64(tag & 0x0f))
	case tag&0xe0 == 0xa0: // fixstr
		return d.str(uint64(tag & 0x1f))
	}
	switch tag {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6: // bin 8/16/32
		n, err := d.uint(1 << (tag - 0xc4))
		if err != nil {
			return nil, err
		}
		b, err := d.take(n)
		if err != nil {
			return nil, err
		}
		return append([]byte(nil), b...), nil
	case 0xca: // float32
		u, err := d.uint(4)
		if err != nil {
			return nil, err
		}
		return float64(math.Float32frombits(uint32(u))), nil
	case 0xcb: // float64
		u, err := d.uint(8)
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(u), nil
	case 0xcc, 0xcd, 0xce, 0xcf: // uint 8/16/32/64
		u, err := d.uint(1 << (tag - 0xcc))
		if err != nil {
			return nil, err
		}
		return u, nil
	case 0xd0, 0xd1, 0xd2, 0xd3: // int 8/16/32/64
		size := 1 << (tag - 0xd0)
		u, err := d.uint(size)
		if err != nil {
			return nil, err
		}
		shift := 64 - 8*size // sign-extend from size bytes
		return int64(u<<shift) >> shift, nil
	case 0xd9, 0xda, 0xdb: // str 8/16/32
		n, err := d.uint(1 << (tag - 0xd9))
		if err != nil {
			return nil, err
		}
		return d.str(n)
	case 0xdc, 0xdd: // array 16/32
		n, err := d.uint(2 << (tag - 0xdc))
		if err != nil {
			return nil, err
		}
		return d.array(n)
	case 0xde, 0xdf: // map 16/32
		n, err := d.uint(2 << (tag - 0xde))
		if err != nil {
			return nil, err
		}
		return d.mapValue(n)
	}
	// 0xc1 is never used; 0xc7-0xc9 and 0xd4-0xd8 are extension types.
	return nil, fmt.Errorf("msgpack: unsupported type byte 0x%02x at offset %d", tag, d.pos-1)
}

func (d *msgpackDecoder) str(n uint64) (any, error) {
	b, err := d.take(n)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func (d *msgpackDecoder) enter() error {
	d.depth++
	if d.depth > maxMsgpackDepth {
		return fmt.Errorf("msgpack: nested deeper than %d levels", maxMsgpackDepth)
	}
	return nil
}

func (d *msgpackDecoder) array(n uint64) (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer func() { d.depth-- }()
	// Every element takes at least one byte.
	if n > uint64(len(d.data)-d.pos) {
		return nil, errMsgpackTruncated
	}
	items := make([]any, n)
	for i := range items {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		items[i] = v
	}
	return items, nil
}

func (d *msgpackDecoder) mapValue(n uint64) (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer func() { d.depth-- }()
	// Every entry takes at least two bytes.
	if n > uint64(len(d.data)-d.pos)/2 {
		return nil, errMsgpackTruncated
	}
	m := make(map[string]any, n)
	for range n {
		keyPos := d.pos
		k, err := d.value()
		if err != nil {
			return nil, err
		}
		key, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("msgpack: map key at offset %d is %T, not a string", keyPos, k)
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("msgpack: duplicate map key %q at offset %d", key, keyPos)
		}
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		m[key] = v
	}
	return m, nil
}
