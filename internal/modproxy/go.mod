module github.com/retrysafe/retrysafe/internal/modproxy

go 1.26.0

require golang.org/x/mod v0.42.0
