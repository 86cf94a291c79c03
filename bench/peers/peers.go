// Package peers benchmarks retrysafe's middleware against Go peers in a
// module of its own, so the main module never requires them.
package peers
