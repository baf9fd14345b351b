// Package docs holds the API's description, openapi.yaml (OpenAPI 3.1),
// so that the API can serve it and its tests can validate every request
// and response against it. The file is the contract: a change to the API
// that it does not describe fails the tests.
//
// It also holds failures.md, the walkthrough of what fails and what
// happens then, which the console serves so that each step of a request's
// story can link the section that explains it; and errors.md, every
// problem code, which the api serves at GET /errors, where each problem's
// type points by default.
package docs

import _ "embed"

// OpenAPI is openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Failures is failures.md.
//
//go:embed failures.md
var Failures []byte

// Errors is errors.md, written by make docs from problem.Codes.
//
//go:embed errors.md
var Errors []byte
