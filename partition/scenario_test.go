package partition

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A scenario file (testdata/*.json) is one partitioning problem and what
// must hold of its answer.
type scenario struct {
	About    string `json:"about"`
	Nodes    []Node `json:"-"`
	RawNodes []struct {
		CPU int64 `json:"cpu"`
		GPU int64 `json:"gpu"`
	} `json:"nodes"`
	Vertices []struct {
		CPU   int64 `json:"cpu"`
		GPU   int64 `json:"gpu"`
		Group int   `json:"group"`
		Pin   *int  `json:"pin"`
	} `json:"vertices"`
	Edges     [][3]int64 `json:"edges"`
	Tolerance float64    `json:"tolerance"`
	Seed      uint64     `json:"seed"`
	// Levels, when present, runs PartitionLevels with them (one per vertex)
	// and WindowPerNode instead of Partition.
	Levels        []int `json:"levels"`
	WindowPerNode int   `json:"window_per_node"`
	Expect        struct {
		Error       string         `json:"error"` // "", "invalid", "infeasible"
		ErrorVertex *int           `json:"error_vertex"`
		ErrorEdge   *int           `json:"error_edge"`
		ErrorText   string         `json:"error_text"`
		Cut         *int64         `json:"cut"`
		MinCut      *int64         `json:"min_cut"`
		Balanced    *bool          `json:"balanced"`
		Together    [][]int        `json:"together"`
		Apart       [][]int        `json:"apart"`
		On          map[string]int `json:"on"`
		SplitGroups *[]int         `json:"split_groups"`
		LoadsCPU    []int64        `json:"loads_cpu"`
		// MaxWindowImbalance bounds Result.WindowImbalance (PartitionLevels).
		MaxWindowImbalance float64 `json:"max_window_imbalance"`
	} `json:"expect"`
}

func (s *scenario) run() (*Graph, *Result, error) {
	b := NewBuilder(len(s.Vertices))
	for _, v := range s.Vertices {
		i := b.AddVertex(Vertex{CPU: v.CPU, GPU: v.GPU, Group: v.Group})
		if v.Pin != nil {
			b.Pin(i, *v.Pin)
		}
	}
	for _, e := range s.Edges {
		b.AddEdge(int(e[0]), int(e[1]), e[2])
	}
	g, err := b.Build()
	if err != nil {
		return nil, nil, err
	}
	for _, n := range s.RawNodes {
		s.Nodes = append(s.Nodes, Node{CPU: n.CPU, GPU: n.GPU})
	}
	opt := Options{Tolerance: s.Tolerance, Seed: s.Seed, WindowPerNode: s.WindowPerNode}
	if s.Levels != nil {
		res, err := PartitionLevels(g, s.Nodes, s.Levels, opt)
		return g, res, err
	}
	res, err := Partition(g, s.Nodes, opt)
	return g, res, err
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var s scenario
			dec := json.NewDecoder(strings.NewReader(string(data)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&s); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			t.Log(s.About)
			g, res, err := s.run()
			ex := s.Expect
			if ex.Error != "" {
				checkScenarioError(t, &s, err)
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if err := Check(g, s.Nodes, res.Assign); err != nil {
				t.Fatalf("hard constraint broken: %v", err)
			}
			if ex.Cut != nil && res.Cut != *ex.Cut {
				t.Errorf("cut %d, want %d (assign %v)", res.Cut, *ex.Cut, res.Assign)
			}
			if ex.MinCut != nil && res.Cut < *ex.MinCut {
				t.Errorf("cut %d, below the least possible %d", res.Cut, *ex.MinCut)
			}
			if ex.Balanced != nil && res.Balanced != *ex.Balanced {
				t.Errorf("balanced %v, want %v (loads %v)", res.Balanced, *ex.Balanced, res.Loads)
			}
			for _, set := range ex.Together {
				for _, v := range set[1:] {
					if res.Assign[v] != res.Assign[set[0]] {
						t.Errorf("vertices %v not together: %v", set, res.Assign)
					}
				}
			}
			for _, set := range ex.Apart {
				if res.Assign[set[0]] == res.Assign[set[1]] {
					t.Errorf("vertices %v together: %v", set, res.Assign)
				}
			}
			for vs, node := range ex.On {
				var v int
				if err := json.Unmarshal([]byte(vs), &v); err != nil {
					t.Fatal(err)
				}
				if res.Assign[v] != node {
					t.Errorf("vertex %d on node %d, want %d", v, res.Assign[v], node)
				}
			}
			if ex.SplitGroups != nil && !slices.Equal(res.SplitGroups, *ex.SplitGroups) &&
				!(len(res.SplitGroups) == 0 && len(*ex.SplitGroups) == 0) {
				t.Errorf("split groups %v, want %v", res.SplitGroups, *ex.SplitGroups)
			}
			if ex.MaxWindowImbalance > 0 && res.WindowImbalance > ex.MaxWindowImbalance {
				t.Errorf("window imbalance %.3f, want <= %.3f (assign %v)", res.WindowImbalance, ex.MaxWindowImbalance, res.Assign)
			}
			if ex.LoadsCPU != nil {
				var got []int64
				for _, l := range res.Loads {
					got = append(got, l.CPU)
				}
				if !slices.Equal(got, ex.LoadsCPU) {
					t.Errorf("CPU loads %v, want %v", got, ex.LoadsCPU)
				}
			}
		})
	}
}

func checkScenarioError(t *testing.T, s *scenario, err error) {
	t.Helper()
	ex := s.Expect
	if err == nil {
		t.Fatalf("no error, want %s", ex.Error)
	}
	want := map[string]error{"invalid": ErrInvalid, "infeasible": ErrInfeasible}[ex.Error]
	if want == nil {
		t.Fatalf("scenario: unknown error kind %q", ex.Error)
	}
	if !errors.Is(err, want) {
		t.Errorf("error %v, want %v", err, want)
	}
	if ex.ErrorVertex != nil {
		var ve *VertexError
		if !errors.As(err, &ve) || ve.Vertex != *ex.ErrorVertex {
			t.Errorf("error %v does not name vertex %d", err, *ex.ErrorVertex)
		}
	}
	if ex.ErrorEdge != nil {
		var ee *EdgeError
		if !errors.As(err, &ee) || ee.Edge != *ex.ErrorEdge {
			t.Errorf("error %v does not name edge %d", err, *ex.ErrorEdge)
		}
	}
	if !strings.Contains(err.Error(), ex.ErrorText) {
		t.Errorf("error %q does not say %q", err, ex.ErrorText)
	}
}
