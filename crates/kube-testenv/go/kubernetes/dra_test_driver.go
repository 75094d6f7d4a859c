//go:build tools

// Kubernetes' own DRA test driver (its kubelet-plugin subcommand publishes devices device-00 ..
// in a pool named after the node and prepares claims with CDI specs that set environment
// variables), built by kube-testenv as the tool dra-test-driver. It is a file of its own, not a
// line of tools.go: the other Kubernetes tools embed tools.go, and a change to it would give
// their cached binaries new keys.
package tools

import (
	_ "k8s.io/kubernetes/test/e2e/dra/test-driver"
)
