// Package jsonscan walks JSON text byte by byte, for the readers that take
// the common shape of a large document by hand and leave everything else
// to encoding/json: the coordinator's submit body (cluster/coord,
// splitSubmit) and a run's status with its task table (cluster,
// readStatus).
//
// It checks only what its caller reads. Skip finds the end of a value
// without checking it, so a reader that skips a member must have
// encoding/json read the whole document, or what is left of it, before it
// trusts any of it. Nothing here reports an error: a false result means
// "not read here", and the caller hands the document to encoding/json,
// which says what is wrong with it.
//
// How to drive it: make a Scanner over the bytes, call Space, then read
// with Eat, Object, String, Text and Skip, each of which starts at I and
// leaves I after what it read; End, at the last, says whether only white
// space is left. For example, an object whose one member of interest is
// "tasks":
//
//	s := jsonscan.Scanner{B: data}
//	s.Space()
//	ok := s.Object(func(key []byte, k jsonscan.Kind) bool {
//		if k == jsonscan.ASCII && string(key) == "tasks" {
//			return readTable(&s) // reads the value at s.I
//		}
//		return k == jsonscan.ASCII && s.Skip()
//	}) && s.End()
//
// A caller that must read exactly as encoding/json reads has to keep to
// keys of Kind ASCII: encoding/json matches a key to a field without case
// (Unicode's simple folding, so a key outside ASCII can match an ASCII
// field's name) and unquotes escapes first.
//
// cluster/spec has a scanner of its own: it checks everything it reads,
// builds a tree and counts lines, which these readers do not need.
package jsonscan
