package spec

import (
	"embed"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:embed examples/*.yaml
var examplesFS embed.FS

// Example is one bundled example flow file (cluster/spec/examples).
type Example struct {
	Name string // the file name without extension, e.g. "listing5-dowhile"
	Path string // "examples/listing5-dowhile.yaml"
	Data []byte
}

// Parse parses the example (it is always valid against funcs.Default()).
func (e Example) Parse() (*File, error) { return Parse(e.Path, e.Data) }

// Examples returns the bundled examples sorted by name: the seed's Listings
// 1–6 (static, subflow, module, if-else, do-while, nested loops) and saxpy on
// the CPU and a GPU. `coordinator dev` runs them when given no flow.
func Examples() []Example {
	entries, err := fs.ReadDir(examplesFS, "examples")
	if err != nil {
		return nil // cannot happen: the directory is embedded
	}
	var out []Example
	for _, e := range entries {
		p := path.Join("examples", e.Name())
		data, err := examplesFS.ReadFile(p)
		if err != nil {
			continue
		}
		out = append(out, Example{Name: strings.TrimSuffix(e.Name(), path.Ext(e.Name())), Path: p, Data: data})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
