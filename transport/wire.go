package transport

import (
	"encoding/binary"
	"fmt"
	"math"
)

// This file holds the hand-rolled msgpack layer every message type is built on:
// append-style writers (no reflection, no intermediate buffers) and a bounds-checked
// reader. The bytes are standard msgpack, so any msgpack library can read them; the
// reader accepts every msgpack encoding of the kinds it expects (including
// non-minimal ones, such as the fixed-width array32 header the Batcher patches in
// place) and rejects everything else with ErrMalformed.

// msgpack format bytes used here.
const (
	mpNil     = 0xc0
	mpFalse   = 0xc2
	mpTrue    = 0xc3
	mpBin8    = 0xc4
	mpBin16   = 0xc5
	mpBin32   = 0xc6
	mpUint8   = 0xcc
	mpUint16  = 0xcd
	mpUint32  = 0xce
	mpUint64  = 0xcf
	mpInt8    = 0xd0
	mpInt16   = 0xd1
	mpInt32   = 0xd2
	mpInt64   = 0xd3
	mpStr8    = 0xd9
	mpStr16   = 0xda
	mpStr32   = 0xdb
	mpArray16 = 0xdc
	mpArray32 = 0xdd
	mpMap16   = 0xde
	mpMap32   = 0xdf
)

func appendMapHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return append(b, mpMap16, byte(n>>8), byte(n))
	default:
		return append(b, mpMap32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(b, mpArray16, byte(n>>8), byte(n))
	default:
		return append(b, mpArray32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// isArrayHeader reports whether c starts a msgpack array.
func isArrayHeader(c byte) bool { return c&0xf0 == 0x90 || c == mpArray16 || c == mpArray32 }

// appendArray32Header writes a fixed-width array header whose count can be patched
// later with putArray32Count (used for batches whose length is unknown up front).
func appendArray32Header(b []byte) []byte {
	return append(b, mpArray32, 0, 0, 0, 0)
}

func putArray32Count(b []byte, at int, n int) {
	binary.BigEndian.PutUint32(b[at+1:], uint32(n))
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, mpUint8, byte(v))
	case v <= math.MaxUint16:
		return append(b, mpUint16, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return append(b, mpUint32, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return append(b, mpUint64, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

func appendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return appendUint(b, uint64(v))
	}
	switch {
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, mpInt8, byte(v))
	case v >= math.MinInt16:
		return append(b, mpInt16, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		return append(b, mpInt32, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		u := uint64(v)
		return append(b, mpInt64, byte(u>>56), byte(u>>48), byte(u>>40), byte(u>>32),
			byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
	}
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, mpTrue)
	}
	return append(b, mpFalse)
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, mpStr8, byte(n))
	case n <= math.MaxUint16:
		b = append(b, mpStr16, byte(n>>8), byte(n))
	default:
		b = append(b, mpStr32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

// appendBin writes nil for a nil slice and bin otherwise, so nil and empty survive
// a round trip distinctly.
func appendBin(b []byte, v []byte) []byte {
	if v == nil {
		return append(b, mpNil)
	}
	return append(appendBinHeader(b, len(v)), v...)
}

// appendBinHeader appends the header of a bin of n bytes (the bytes to
// follow).
func appendBinHeader(b []byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(b, mpBin8, byte(n))
	case n <= math.MaxUint16:
		return append(b, mpBin16, byte(n>>8), byte(n))
	default:
		return append(b, mpBin32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// reader decodes msgpack from a byte slice. Every method checks bounds before it
// reads or allocates, so truncated or hostile input yields an error, never a panic
// or an allocation sized by the input.
type reader struct {
	b   []byte
	off int
	lim Limits
	msg string // message type being decoded, for error text
	ver uint8  // the message's version, once its header is read
}

func (r *reader) errf(format string, args ...any) error {
	return fmt.Errorf("%w: %s at byte %d: %s", ErrMalformed, r.msg, r.off, fmt.Sprintf(format, args...))
}

func (r *reader) oversized(what string, n, max int) error {
	return fmt.Errorf("%w: %w: %s at byte %d: %s is %d, limit %d", ErrMalformed, ErrOversized, r.msg, r.off, what, n, max)
}

func (r *reader) need(n int) error {
	if n < 0 || len(r.b)-r.off < n {
		return r.errf("truncated: need %d bytes, have %d", n, len(r.b)-r.off)
	}
	return nil
}

func (r *reader) byte1() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.errf("truncated: unexpected end of input")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) be(n int) (uint64, error) {
	if err := r.need(n); err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range r.b[r.off : r.off+n] {
		v = v<<8 | uint64(c)
	}
	r.off += n
	return v, nil
}

// arrayLen reads an array header and checks that at least n bytes could follow
// (every element takes at least one byte).
func (r *reader) arrayLen(what string, max int) (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case c == mpArray16:
		n, err = r.be(2)
	case c == mpArray32:
		n, err = r.be(4)
	default:
		r.off--
		return 0, r.errf("%s: want an array, found format byte 0x%02x", what, c)
	}
	if err != nil {
		return 0, err
	}
	if max > 0 && n > uint64(max) {
		return 0, r.oversized(what+" length", int(min(n, math.MaxInt32)), max)
	}
	if n > uint64(len(r.b)-r.off) {
		return 0, r.errf("truncated: %s claims %d elements, %d bytes remain", what, n, len(r.b)-r.off)
	}
	return int(n), nil
}

// mapLen reads a map header (n key/value pairs) and checks that at least 2n
// bytes could follow.
func (r *reader) mapLen(what string, max int) (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c&0xf0 == 0x80:
		n = uint64(c & 0x0f)
	case c == mpMap16:
		n, err = r.be(2)
	case c == mpMap32:
		n, err = r.be(4)
	default:
		r.off--
		return 0, r.errf("%s: want a map, found format byte 0x%02x", what, c)
	}
	if err != nil {
		return 0, err
	}
	if max > 0 && n > uint64(max) {
		return 0, r.oversized(what+" length", int(min(n, math.MaxInt32)), max)
	}
	if 2*n > uint64(len(r.b)-r.off) {
		return 0, r.errf("truncated: %s claims %d entries, %d bytes remain", what, n, len(r.b)-r.off)
	}
	return int(n), nil
}

// fields reads the array header of a struct-like message and insists on exactly want
// fields.
func (r *reader) fields(what string, want int) error {
	n, err := r.arrayLen(what, 0)
	if err != nil {
		return err
	}
	if n != want {
		return r.errf("%s: want %d fields, found %d", what, want, n)
	}
	return nil
}

// uint reads an unsigned integer; a positive fixint (most of a Signal's
// fields) without a call.
func (r *reader) uint(what string) (uint64, error) {
	if r.off < len(r.b) && r.b[r.off] < 0x80 {
		r.off++
		return uint64(r.b[r.off-1]), nil
	}
	return r.uintSlow(what)
}

func (r *reader) uintSlow(what string) (uint64, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c < 0x80:
		return uint64(c), nil
	case c == mpUint8:
		return r.be(1)
	case c == mpUint16:
		return r.be(2)
	case c == mpUint32:
		return r.be(4)
	case c == mpUint64:
		return r.be(8)
	case c == mpInt8, c == mpInt16, c == mpInt32, c == mpInt64:
		// Signed encodings of non-negative values are legal msgpack.
		v, err := r.intBody(c)
		if err != nil {
			return 0, err
		}
		if v < 0 {
			return 0, r.errf("%s: negative value %d for an unsigned field", what, v)
		}
		return uint64(v), nil
	case c >= 0xe0:
		return 0, r.errf("%s: negative value %d for an unsigned field", what, int8(c))
	}
	r.off--
	return 0, r.errf("%s: want an unsigned integer, found format byte 0x%02x", what, c)
}

func (r *reader) uint32(what string) (uint32, error) {
	v, err := r.uint(what)
	if err != nil {
		return 0, err
	}
	if v > math.MaxUint32 {
		return 0, r.errf("%s: %d does not fit in 32 bits", what, v)
	}
	return uint32(v), nil
}

func (r *reader) uint8(what string) (uint8, error) {
	v, err := r.uint(what)
	if err != nil {
		return 0, err
	}
	if v > math.MaxUint8 {
		return 0, r.errf("%s: %d does not fit in 8 bits", what, v)
	}
	return uint8(v), nil
}

func (r *reader) intBody(c byte) (int64, error) {
	switch c {
	case mpInt8:
		v, err := r.be(1)
		return int64(int8(v)), err
	case mpInt16:
		v, err := r.be(2)
		return int64(int16(v)), err
	case mpInt32:
		v, err := r.be(4)
		return int64(int32(v)), err
	default:
		v, err := r.be(8)
		return int64(v), err
	}
}

func (r *reader) int(what string) (int64, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c < 0x80:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c == mpInt8, c == mpInt16, c == mpInt32, c == mpInt64:
		return r.intBody(c)
	case c == mpUint8, c == mpUint16, c == mpUint32, c == mpUint64:
		r.off--
		v, err := r.uint(what)
		if err != nil {
			return 0, err
		}
		if v > math.MaxInt64 {
			return 0, r.errf("%s: %d overflows int64", what, v)
		}
		return int64(v), nil
	}
	r.off--
	return 0, r.errf("%s: want an integer, found format byte 0x%02x", what, c)
}

func (r *reader) bool(what string) (bool, error) {
	c, err := r.byte1()
	if err != nil {
		return false, err
	}
	switch c {
	case mpTrue:
		return true, nil
	case mpFalse:
		return false, nil
	}
	r.off--
	return false, r.errf("%s: want a bool, found format byte 0x%02x", what, c)
}

// rawStr returns the bytes of a str (or nil) without copying; max bounds its length.
func (r *reader) rawStr(what string, max int) ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == mpStr8:
		n, err = r.be(1)
	case c == mpStr16:
		n, err = r.be(2)
	case c == mpStr32:
		n, err = r.be(4)
	case c == mpNil:
		return nil, nil
	default:
		r.off--
		return nil, r.errf("%s: want a string, found format byte 0x%02x", what, c)
	}
	if err != nil {
		return nil, err
	}
	if max > 0 && n > uint64(max) {
		return nil, r.oversized(what, int(min(n, math.MaxInt32)), max)
	}
	if err := r.need(int(n)); err != nil {
		return nil, err
	}
	s := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

func (r *reader) str(what string, max int) (string, error) {
	s, err := r.rawStr(what, max)
	return string(s), err
}

// bin reads a bin (or nil, which yields a nil slice). The result aliases the input
// when alias is set, else it is a fresh copy.
func (r *reader) bin(what string, max int, alias bool) ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch c {
	case mpNil:
		return nil, nil
	case mpBin8:
		n, err = r.be(1)
	case mpBin16:
		n, err = r.be(2)
	case mpBin32:
		n, err = r.be(4)
	default:
		r.off--
		return nil, r.errf("%s: want bytes, found format byte 0x%02x", what, c)
	}
	if err != nil {
		return nil, err
	}
	if max > 0 && n > uint64(max) {
		return nil, r.oversized(what, int(min(n, math.MaxInt32)), max)
	}
	if err := r.need(int(n)); err != nil {
		return nil, err
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	if alias {
		return v, nil
	}
	return append([]byte{}, v...), nil
}

func (r *reader) end() error {
	if r.off != len(r.b) {
		return r.errf("%d trailing bytes after the message", len(r.b)-r.off)
	}
	return nil
}
