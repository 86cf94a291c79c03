package retrysafe

// CanonicalJSON is canonicalJSON under the name the in-package tests of
// canonical JSON use.
var CanonicalJSON = canonicalJSON
