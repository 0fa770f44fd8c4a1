package nodesdk_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/hetflow/hetflow/cluster/funcs"
	"github.com/hetflow/hetflow/cluster/nodesdk"
)

// The node binary of the package doc (doc.go shows the same lines, which
// TestDocShowsTheExample checks).
func Example() {
	reg := funcs.Default() // the built-ins, and yours beside them
	reg.MustRegister(funcs.Entry{
		Name: "wordcount",
		Doc:  "counts the words of args.text and of the inputs",
		CPU: func(ctx context.Context, c *funcs.Call) (funcs.Result, error) {
			text, err := c.Args.String("text", "")
			if err != nil {
				return funcs.Result{}, err
			}
			n := len(strings.Fields(text))
			for _, in := range c.Inputs {
				n += len(strings.Fields(string(in)))
			}
			return funcs.Result{Output: []byte(strconv.Itoa(n) + " words")}, nil
		},
	})
	if false { // Main runs the node and exits: the example is compiled, not run
		nodesdk.Main(reg)
	}
}

// The example in the package doc is the one that compiles above.
func TestDocShowsTheExample(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)
	body = body[strings.Index(body, "func Example() {"):]
	body = body[:strings.Index(body, "\tif false {")]
	var docLines []string
	for _, l := range strings.Split(string(doc), "\n") {
		if s, ok := strings.CutPrefix(l, "//\t"); ok {
			docLines = append(docLines, strings.TrimSpace(s))
		}
	}
	joined := "\n" + strings.Join(docLines, "\n") + "\n"
	for _, l := range strings.Split(body, "\n")[1:] {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if !strings.Contains(joined, "\n"+l+"\n") {
			t.Errorf("doc.go's example lacks the line %q of Example", l)
		}
	}
}
