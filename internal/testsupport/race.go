//go:build race

package testsupport

// defaultFactor is the default deadline factor of a binary built with -race,
// which runs several times slower.
const defaultFactor = 2
