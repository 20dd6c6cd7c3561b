// Package validate checks ../daemonset.yaml against the Kubernetes API
// types: each document is decoded as the API server does with
// fieldValidation=Strict (unknown and duplicate fields are errors), then
// the settings tenge-trace needs are asserted.
//
// Run: go test -count=1 ./... (without -count=1, go test's cache, blind to
// files outside the module such as ../daemonset.yaml, may replay a pass).
package validate
