package coord

import (
	"bytes"
	"encoding/json"

	"github.com/hetflow/hetflow/cluster/proto"
	"github.com/hetflow/hetflow/internal/jsonscan"
)

// A submit's body is nearly all its flow file's text, one JSON string: 7 MB
// for the 100K-task layered DAG in JSON (its quotes escaped). encoding/json
// copied it into its Decoder's buffer, scanned it, unquoted it into a
// string, and handleSubmit copied that into the bytes Submit takes: some
// 30 MB allocated and four passes over it. splitSubmit reads the flow's
// string by hand, straight into those bytes, and leaves the rest of the
// body, the string replaced by "", to encoding/json as before (UseNumber,
// one value). Anything it does not read exactly as encoding/json reads it
// (an escape it leaves, a key encoding/json would fold to "flow", two of
// them, bad JSON) goes to readBody whole: the same answer and the same
// errors as before (TestSplitSubmitAsEncodingJSON, FuzzSplitSubmit). The
// bytes are walked, and the string read, with internal/jsonscan.

// splitSubmit reads body, a submit's JSON; ok is false for what it leaves
// to encoding/json.
func splitSubmit(body []byte) (req proto.SubmitRequest, flow []byte, ok bool) {
	rest, ok := jsonscan.CutMember(body, "flow", `""`, func(s *jsonscan.Scanner) bool {
		flow, ok = s.Text()
		return ok
	})
	if !ok {
		return req, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.UseNumber() // as readBody
	if dec.Decode(&req) != nil || dec.More() {
		return req, nil, false
	}
	return req, flow, true
}
