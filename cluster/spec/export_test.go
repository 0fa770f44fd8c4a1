package spec

// StripPositions drops the line numbers Parse records, so parsed and built
// flows compare with reflect.DeepEqual.
func StripPositions(f *File) {
	for i := range f.Flows {
		f.Flows[i].pos = nil
		for j := range f.Flows[i].Params {
			f.Flows[i].Params[j].pos = nil
		}
		for j := range f.Flows[i].Tasks {
			f.Flows[i].Tasks[j].pos = nil
		}
	}
}

// StripTask drops a task's positions.
func StripTask(t *Task) { t.pos = nil }
