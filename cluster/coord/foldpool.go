package coord

import "sync"

// foldArrays keeps the large arrays of finished runs' folds for the next
// run's fold: a run of a 100,000-task flow folds into a 4.8 MB array of
// aggregates and a 1.6 MB journal, which, made anew for each run, the
// runtime must zero and fault in and the garbage collector must reclaim
// (the largest allocations of a run again). A fold hands its aggregates
// back when it is packed (Fold.pack: a finished run's, once its status
// was read) and its journal when a change of the whole table drops it
// (Touch). At most keptFoldArrays of each kind are kept, none over
// maxPooledAgg entries: what is kept is never more than the folds that
// gave it held before.
var foldArrays struct {
	mu       sync.Mutex
	aggs     [][]taskAgg
	journals [][]change
}

const (
	keptFoldArrays = 2
	minPooledAgg   = 4096    // smaller arrays are cheap to make
	maxPooledAgg   = 1 << 20 // 48 MB of aggregates
)

// takeAggs returns a zeroed array of n aggregates, a kept one if one is
// large enough.
func takeAggs(n int) []taskAgg {
	if s := takeKept(&foldArrays.aggs, n); s != nil {
		s = s[:n]
		clear(s)
		return s
	}
	return make([]taskAgg, n)
}

// putAggs keeps s for a later fold; the caller no longer uses it.
func putAggs(s []taskAgg) { putKept(&foldArrays.aggs, s) }

// takeJournal returns an empty journal with room for n changes, a kept one
// if one is large enough.
func takeJournal(n int) []change {
	if s := takeKept(&foldArrays.journals, n); s != nil {
		return s
	}
	return make([]change, 0, n)
}

// putJournal keeps s for a later fold; the caller no longer uses it.
func putJournal(s []change) { putKept(&foldArrays.journals, s) }

// takeKept removes and returns, empty, a kept array of foldArrays with
// room for n (nil: none, or n too small to keep).
func takeKept[T any](kept *[][]T, n int) []T {
	if n < minPooledAgg {
		return nil
	}
	foldArrays.mu.Lock()
	defer foldArrays.mu.Unlock()
	return takeFit(kept, n)
}

// putKept keeps s in foldArrays when its size is worth keeping.
func putKept[T any](kept *[][]T, s []T) {
	if cap(s) < minPooledAgg || cap(s) > maxPooledAgg {
		return
	}
	foldArrays.mu.Lock()
	defer foldArrays.mu.Unlock()
	keep(kept, s[:0])
}

// takeFit removes and returns the smallest kept array with room for n (nil:
// none); foldArrays.mu is held.
func takeFit[T any](kept *[][]T, n int) []T {
	best := -1
	for i, s := range *kept {
		if cap(s) >= n && (best < 0 || cap(s) < cap((*kept)[best])) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	s := (*kept)[best]
	last := len(*kept) - 1
	(*kept)[best], (*kept)[last] = (*kept)[last], nil
	*kept = (*kept)[:last]
	return s
}

// keep adds s to kept, in place of the smallest kept array when full (if s
// is larger); foldArrays.mu is held.
func keep[T any](kept *[][]T, s []T) {
	if len(*kept) < keptFoldArrays {
		*kept = append(*kept, s)
		return
	}
	small := 0
	for i := range *kept {
		if cap((*kept)[i]) < cap((*kept)[small]) {
			small = i
		}
	}
	if cap(s) > cap((*kept)[small]) {
		(*kept)[small] = s
	}
}
