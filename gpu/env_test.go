package gpu

import (
	"os"
	"testing"
)

// unsetenv unsets key for the rest of the test (t.Setenv first, so it is restored).
func unsetenv(t *testing.T, key string) {
	t.Helper()
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}
