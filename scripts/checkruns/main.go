// Command checkruns reads run statuses (one JSON object per line, as
// `coordinator dev --json` and `coordinator status --json` print them) on
// standard input and checks that each run succeeded with every task that ran
// executed exactly once (executions == activations) and none left running or
// pending. It prints one line per run and exits 1 if any run fails the check.
//
//	coordinator dev --json FLOW | go run ./scripts/checkruns
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/hetflow/hetflow/cluster/proto"
)

func main() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	bad, runs := 0, 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var st proto.RunStatus
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			fmt.Fprintf(os.Stderr, "checkruns: %v\n", err)
			os.Exit(2)
		}
		runs++
		var problems []string
		if st.State != proto.RunSucceeded {
			problems = append(problems, fmt.Sprintf("state %s %s", st.State, st.Error))
		}
		done := 0
		for _, t := range st.Tasks {
			switch t.State {
			case proto.TaskDone:
				done++
				if t.Executions != t.Activations {
					problems = append(problems, fmt.Sprintf("%s executed %d times for %d activations", t.Name, t.Executions, t.Activations))
				}
			case proto.TaskSkipped:
			default:
				problems = append(problems, fmt.Sprintf("%s %s", t.Name, t.State))
			}
		}
		verdict := "ok"
		if len(problems) > 0 {
			bad++
			verdict = "BAD: " + strings.Join(problems, "; ")
		}
		fmt.Printf("%s %s: %d tasks done: %s\n", st.ID, st.State, done, verdict)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "checkruns: %v\n", err)
		os.Exit(2)
	}
	if runs == 0 || bad > 0 {
		fmt.Printf("checkruns: %d of %d runs bad\n", bad, runs)
		os.Exit(1)
	}
}
