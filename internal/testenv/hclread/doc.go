// Package hclread reads a Terraform file's resources for tests: each
// resource block by its address, and its attributes as text (a literal's
// value, a reference's dotted path), so that a test can compare what a
// .tf says with what a service holds.
//
// It owns no file and knows nothing of pubsink or of a provider. Entry
// point: Resources, then Attr on a resource.
//
// # Guarantees
//
// Resources parses with github.com/hashicorp/hcl/v2's native syntax, as
// Terraform does; a file it accepts is valid HCL.
//
// # Errors
//
// Resources returns the parser's diagnostics for a file that is not valid
// HCL; Attr returns an error for an expression that is neither a literal
// nor a plain reference.
package hclread
