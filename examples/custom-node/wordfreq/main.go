// Command wordfreq stands for the program an exec task runs (a script, a
// solver, ffmpeg): it reads text on stdin and prints its N most frequent
// words, "word count" a line, most frequent first.
package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	top := 3
	if len(os.Args) > 1 {
		n, err := strconv.Atoi(os.Args[1])
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "wordfreq: want a positive count, got %q\n", os.Args[1])
			os.Exit(2)
		}
		top = n
	}
	counts := map[string]int{}
	sc := bufio.NewScanner(os.Stdin)
	sc.Split(bufio.ScanWords)
	for sc.Scan() {
		counts[strings.ToLower(sc.Text())]++
	}
	words := make([]string, 0, len(counts))
	for w := range counts {
		words = append(words, w)
	}
	sort.Slice(words, func(i, j int) bool {
		if counts[words[i]] != counts[words[j]] {
			return counts[words[i]] > counts[words[j]]
		}
		return words[i] < words[j]
	})
	for i, w := range words {
		if i == top {
			break
		}
		fmt.Printf("%s %d\n", w, counts[w])
	}
}
