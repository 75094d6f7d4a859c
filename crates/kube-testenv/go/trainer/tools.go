//go:build tools

// Package tools pins the Kubeflow Trainer controller manager kube-testenv builds:
// `go build -o DIR github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager`.
package tools

import (
	_ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
)
