package localexec

import "unsafe"

var sizeofNode = unsafe.Sizeof(node{})

func uintptrOf(n *node) uintptr { return uintptr(unsafe.Pointer(n)) }
