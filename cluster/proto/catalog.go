package proto

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
)

// Catalog is what a node advertises it can run: its functions. The ring
// carries only its hash (Meta.Funcs, memberlist metadata is at most 512
// bytes); the catalog itself is the reply to a request on CatalogSubject.
type Catalog struct {
	Funcs []FuncInfo `json:"funcs"`
}

// FuncInfo is one function of a catalog.
type FuncInfo struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"`    // static, condition, multicondition or subflow
	Domains []string `json:"domains"` // "cpu", "gpu": the bodies it has
	// Args is the function's argument schema, when it declares one
	// (funcs.Entry.Args): a task's arguments are then checked against it.
	Args []ArgInfo `json:"args,omitempty"`
	Doc  string    `json:"doc,omitempty"`
}

// ArgInfo is one argument of a function's schema.
type ArgInfo struct {
	Name string `json:"name"`
	// Type is string, int, float, bool, list, map or any.
	Type     string `json:"type"`
	Required bool   `json:"required,omitempty"`
	Doc      string `json:"doc,omitempty"`
}

// Sorted returns the catalog with its functions in name order.
func (c Catalog) Sorted() Catalog {
	out := Catalog{Funcs: append([]FuncInfo(nil), c.Funcs...)}
	sort.Slice(out.Funcs, func(i, j int) bool { return out.Funcs[i].Name < out.Funcs[j].Name })
	return out
}

// Hash is the catalog's identity: 16 hex digits of the SHA-256 of its
// sorted JSON. A node advertises it in Meta.Funcs; a coordinator fetches
// the catalog again only when it changes.
func (c Catalog) Hash() string {
	b, _ := json.Marshal(c.Sorted()) // plain structs always encode
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// CatalogSubject is the core NATS subject a node answers catalog requests
// on (request/reply: an empty request, the Catalog as JSON). node is a
// valid id (transport.ValidateID).
func CatalogSubject(node string) string { return "hf.funcs." + node }

// NodeFuncs is one entry of GET /v1/funcs: what a live node offers.
// Builtin marks a node that advertises no catalog (an older node): it is
// taken to have the coordinator's own built-ins.
type NodeFuncs struct {
	Node    string     `json:"node"`
	Hash    string     `json:"hash,omitempty"`
	Builtin bool       `json:"builtin,omitempty"`
	Error   string     `json:"error,omitempty"` // the catalog could not be fetched
	Funcs   []FuncInfo `json:"funcs"`
}
