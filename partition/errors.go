package partition

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid reports malformed input: a negative weight, an edge endpoint
	// or pin that names no vertex or node, bad options, no nodes.
	ErrInvalid = errors.New("partition: invalid input")
	// ErrInfeasible reports well-formed input that no assignment satisfies:
	// a GPU vertex with no GPU node, a vertex pinned to a node that cannot
	// hold it, weight on a resource that no node has capacity for.
	ErrInfeasible = errors.New("partition: infeasible")
)

// VertexError is an ErrInvalid or ErrInfeasible about one vertex.
type VertexError struct {
	Vertex int
	Err    error // ErrInvalid or ErrInfeasible
	Detail string
}

func (e *VertexError) Error() string {
	return fmt.Sprintf("%v: vertex %d: %s", e.Err, e.Vertex, e.Detail)
}

func (e *VertexError) Unwrap() error { return e.Err }

// EdgeError is an ErrInvalid about one edge; Edge is its index in the order
// of AddEdge calls.
type EdgeError struct {
	Edge   int
	U, V   int
	Err    error
	Detail string
}

func (e *EdgeError) Error() string {
	return fmt.Sprintf("%v: edge %d (%d-%d): %s", e.Err, e.Edge, e.U, e.V, e.Detail)
}

func (e *EdgeError) Unwrap() error { return e.Err }
