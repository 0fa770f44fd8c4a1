package cli

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := version(bi), "devel, commit 0123456789ab+dirty, go1.26.8"; got != want {
		t.Errorf("version = %q, want %q", got, want)
	}
	bi = &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}}
	if got, want := version(bi), "v0.3.0, go1.26.8"; got != want {
		t.Errorf("version = %q, want %q", got, want)
	}
	if Version() == "" {
		t.Error("Version is empty")
	}
}
