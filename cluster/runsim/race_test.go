//go:build race

package runsim

// Under the race detector (the CI's `go test -race ./...`) a plain run does
// fewer seeds: the simulation is single-threaded, so the detector finds
// little, and the CI runs thousands of seeds without it in a step of its
// own.
const raceEnabled = true
