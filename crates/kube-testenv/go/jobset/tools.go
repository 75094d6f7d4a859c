//go:build tools

// Package tools pins the JobSet controller manager kube-testenv builds. Its main package is
// the module root, so it is built by path: `go build -o DIR sigs.k8s.io/jobset`.
package tools

import (
	_ "sigs.k8s.io/jobset"
)
