//go:build tools

// Package tools pins the Kueue controller manager kube-testenv builds:
// `go build -o DIR sigs.k8s.io/kueue/cmd/kueue`.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
