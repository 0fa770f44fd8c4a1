package proto

import (
	"encoding/binary"
	"fmt"
)

// ProbeBody encodes a termination probe's wave as a KindProbe envelope's
// Body: 8 bytes little-endian.
func ProbeBody(wave uint64) []byte {
	return binary.LittleEndian.AppendUint64(nil, wave)
}

// ProbeWave decodes a KindProbe envelope's Body. Anything but 8 bytes is an
// error wrapping ErrInvalid.
func ProbeWave(body []byte) (uint64, error) {
	if len(body) != 8 {
		return 0, fmt.Errorf("%w: probe body is %d bytes, want 8", ErrInvalid, len(body))
	}
	return binary.LittleEndian.Uint64(body), nil
}
