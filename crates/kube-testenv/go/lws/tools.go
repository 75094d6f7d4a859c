//go:build tools

// Package tools pins the LeaderWorkerSet controller manager kube-testenv builds:
// `go build -o DIR sigs.k8s.io/lws/cmd`.
package tools

import (
	_ "sigs.k8s.io/lws/cmd"
)
