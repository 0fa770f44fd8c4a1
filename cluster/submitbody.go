package cluster

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/hetflow/hetflow/cluster/proto"
)

// encodedBody is a request body encoded already: doWait sends it as it is.
type encodedBody []byte

// submitBody encodes req as json.Marshal does, byte for byte, with its flow
// text (req.Flow is empty) written once into a buffer sized for it:
// json.Marshal of a 100K-task flow's text (megabytes) grew its buffer by
// doubling and copied the result out, some eight times the text's bytes
// allocated a submit, after a copy of the text into a string.
func submitBody(req proto.SubmitRequest, flow []byte) (encodedBody, error) {
	head, err := json.Marshal(req.Path)
	if err != nil {
		return nil, err
	}
	tail, err := json.Marshal(struct {
		ID     string         `json:"id,omitempty"`
		Params map[string]any `json:"params,omitempty"`
	}{req.ID, req.Params})
	if err != nil {
		return nil, err
	}
	rest := 1 // }
	if len(tail) > 2 {
		rest = len(tail) // , and tail's fields and }
	}
	// The text's escapes add about a fifth to a JSON file (its quotes),
	// little to a YAML one: a buffer a quarter over the text's size holds
	// most bodies, and one more growth the others.
	b := make([]byte, 0, len(`{"path":,"flow":""`)+len(head)+len(flow)+len(flow)/4+rest)
	b = append(b, `{"path":`...)
	b = append(b, head...)
	b = append(b, `,"flow":`...)
	b = appendJSONText(b, flow)
	if len(tail) > 2 { // not {}: its fields after the flow's
		b = append(b, ',')
		b = append(b, tail[1:]...)
	} else {
		b = append(b, '}')
	}
	return b, nil
}

// plainJSON marks the bytes appendJSONText copies as they are: ASCII from
// the space on, but for " \\ < > &.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendJSONText appends s as a JSON string the way encoding/json writes a
// Go string (HTML-safe, the default): '"' and '\' escaped with a
// backslash, as are \b \f \n \r \t; the other bytes below 0x20 and < > &
// as \u00XX; a byte that is not UTF-8 as \ufffd; U+2028 and U+2029 as
// \u2028 and \u2029. TestSubmitBodyIsMarshal holds it to json.Marshal.
func appendJSONText(b []byte, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	from := 0 // s[from:i] is to be copied as it is
	for i := 0; i < len(s); {
		c := s[i]
		if plainJSON[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[from:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			from = i
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, s[from:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[from:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += n
			continue
		}
		i += n
		from = i
	}
	b = append(b, s[from:]...)
	return append(b, '"')
}
