// Package docs holds the API's description, openapi.yaml (OpenAPI 3.1),
// so that the API can serve it and its tests can validate every request
// and response against it. The file is the contract: a change to the API
// that it does not describe fails the tests.
package docs

import _ "embed"

// OpenAPI is openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
