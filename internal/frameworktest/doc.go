// Package frameworktest tests the recipes of docs/frameworks.md: the
// net/http middleware behind Echo and chi, each running the shared adapter
// suite (internal/adaptertest). It is a module of its own so that the root
// module never requires a framework; it holds only tests.
package frameworktest
