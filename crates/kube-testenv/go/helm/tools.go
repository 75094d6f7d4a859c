//go:build tools

// Package tools pins the helm command kube-testenv builds for the chart tests:
// `go build -o DIR helm.sh/helm/v3/cmd/helm`.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
