//go:build !race

package testsupport

// defaultFactor is the default deadline factor; 1 without -race.
const defaultFactor = 1
