// Command flowgen writes a generated flow file to stdout, for the
// benchmark scripts (scripts/bench-cluster.sh):
//
//	go run ./internal/flowgen/cmd/flowgen -layers 100 -width 1000 [-seed 1] [-json] > layered.yaml
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/hetflow/hetflow/internal/flowgen"
)

func main() {
	layers := flag.Int("layers", 100, "layers of the layered DAG")
	width := flag.Int("width", 1000, "tasks a layer")
	seed := flag.Uint64("seed", 1, "seed of the predecessors drawn")
	json := flag.Bool("json", false, "write JSON instead of YAML")
	flag.Parse()
	if *layers < 1 || *width < 1 {
		fmt.Fprintln(os.Stderr, "flowgen: -layers and -width must be at least 1")
		os.Exit(2)
	}
	if _, err := os.Stdout.Write(flowgen.Layered(*layers, *width, *seed, *json)); err != nil {
		fmt.Fprintln(os.Stderr, "flowgen:", err)
		os.Exit(1)
	}
}
