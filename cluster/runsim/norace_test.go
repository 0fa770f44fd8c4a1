//go:build !race

package runsim

const raceEnabled = false
