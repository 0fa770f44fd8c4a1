package transport

import "errors"

// Sentinel errors. Functions wrap them with %w and add what and where, so callers
// test with errors.Is.
var (
	// ErrMalformed: an input could not be decoded (truncated, garbage, wrong type,
	// unknown version, out-of-range field). Every decoder error matches it.
	ErrMalformed = errors.New("transport: malformed message")
	// ErrOversized: an input or an outgoing message exceeds a configured size limit
	// (Limits, or the server's max payload). Decoder errors that match it also match
	// ErrMalformed.
	ErrOversized = errors.New("transport: message too large")
	// ErrInvalidID: a run, node or other subject token is empty, too long, or holds
	// a space, a dot or a wildcard.
	ErrInvalidID = errors.New("transport: invalid id")
	// ErrInvalidSignal: a Signal handed to the Batcher is not well formed.
	ErrInvalidSignal = errors.New("transport: invalid signal")
	// ErrClosed: the Conn or Batcher was closed.
	ErrClosed = errors.New("transport: closed")
	// ErrAuth: the server refused the credentials (or their absence).
	ErrAuth = errors.New("transport: not authorised")
	// ErrConnect: no connection could be made before the context ended.
	ErrConnect = errors.New("transport: cannot connect")
	// ErrNoJetStream: the server has no JetStream, or the streams are missing.
	ErrNoJetStream = errors.New("transport: jetstream unavailable")
)
