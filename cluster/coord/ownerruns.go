package coord

import (
	"sort"
	"sync"
	"sync/atomic"
)

// ownerRuns is an assignment (vertex → node id) as its runs of
// consecutive vertices on one node (nodeRuns), so that the owner rule of
// a report's range of tasks (EventFromOwner) is a string compare a run of
// the assignment it crosses, not one a task.
type ownerRuns struct {
	hi   []int    // run k covers the vertices from hi[k-1] (0 for k = 0) up to hi[k], excluded
	node []string // run k's node id
}

// span returns the end of the run of one owner that holds task lo, capped
// at hi, and whether that owner is node. lo must be below the
// assignment's length.
func (o *ownerRuns) span(lo, hi int, node string) (end int, owned bool) {
	k := sort.SearchInts(o.hi, lo+1) // the first run that ends past lo
	return min(o.hi[k], hi), o.node[k] == node
}

// lastOwners is the owner runs of the assignment folded last, and that
// assignment: a run of a flow again on the same placement shares its
// assignment's array with the runs before it (internAssignment, and the
// leader's placed cache), so the runs are found once for all of them.
//
// An assignment is the same one when it is the same array (its first
// element's address) of the same length. That is sound because a run's
// assignment is read-only (a reassign replaces it whole: fsm.go's
// OpRunReassign copies it), and because lastOwners holds the array it was
// made of, which so cannot be freed and its address taken by another
// array while it is kept. It keeps one assignment's array alive after its
// runs are pruned, as lastAssignment does (the same array, when the runs
// are a flow's runs again).
var lastOwners struct {
	mu     sync.Mutex
	assign []string
	runs   *ownerRuns
}

// ownerRunsMade counts the owner runs ownerRunsOf made (not found kept),
// for the tests.
var ownerRunsMade atomic.Int64

// ownerRunsOf is assignment assign's owner runs (assign not empty).
func ownerRunsOf(assign []string) *ownerRuns {
	lo := &lastOwners
	lo.mu.Lock()
	defer lo.mu.Unlock()
	if lo.runs != nil && len(lo.assign) == len(assign) && &lo.assign[0] == &assign[0] {
		return lo.runs
	}
	ownerRunsMade.Add(1)
	o := &ownerRuns{}
	for l, h := range nodeRuns(assign) {
		o.hi = append(o.hi, h)
		o.node = append(o.node, assign[l])
	}
	lo.assign, lo.runs = assign, o
	return o
}
