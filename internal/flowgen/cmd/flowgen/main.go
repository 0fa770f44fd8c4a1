// Command flowgen writes a generated flow file to stdout, for the
// benchmark scripts (scripts/bench-cluster.sh):
//
//	go run ./internal/flowgen/cmd/flowgen -layers 100 -width 1000 [-seed 1] [-json] > layered.yaml
//	go run ./internal/flowgen/cmd/flowgen -modules 100 -layers 10 -width 1000 -json > l1m.json  # 1M tasks
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
	modules := flag.Int("modules", 0, "a chain of this many module tasks, each a layered DAG of -layers × -width (flowgen.LayeredModules); 0: one flat layered DAG")
	flag.Parse()
	if *layers < 1 || *width < 1 || *modules < 0 {
		fmt.Fprintln(os.Stderr, "flowgen: -layers and -width must be at least 1, -modules at least 0")
		os.Exit(2)
	}
	text := flowgen.Layered(*layers, *width, *seed, *json)
	if *modules > 0 {
		text = flowgen.LayeredModules(*modules, *layers, *width, *seed, *json)
	}
	if _, err := os.Stdout.Write(text); err != nil {
		fmt.Fprintln(os.Stderr, "flowgen:", err)
		os.Exit(1)
	}
}
