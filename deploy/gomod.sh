#!/usr/bin/env bash
# Run a go command in one module of the repository on its own (GOWORK=off),
# as a program that requires that module from a release would resolve it:
#
#	deploy/gomod.sh store/sqlite go mod tidy
#	deploy/gomod.sh gateway go get github.com/jackc/pgx/v5@latest
#
# Every go.mod requires its siblings at the next release's version, which no
# public proxy serves yet (docs/releasing.md). Here they come at that
# version from a module proxy written from the working tree
# (internal/modproxy), into a module cache of this run's own: the machine's
# must never hold a version of them with other contents than the release
# will have. Everything else comes from the machine's module cache, then
# from the usual proxy. Afterwards the siblings' lines are dropped from
# go.sum: they change with every commit, and no build needs them (the
# workspace builds siblings from their directories; a user's go.sum gets
# them from the checksum database).
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: deploy/gomod.sh MODULE-DIR go ARGS..." >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(cd "$1" && pwd)
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go run ./internal/modproxy "$tmp/proxy")
cache=$(go env GOMODCACHE)
upstream=$(go env GOPROXY)
cd "$dir"
status=0
GOWORK=off GOFLAGS=-modcacherw GOMODCACHE="$tmp/modcache" GONOSUMDB=github.com/retrysafe \
	GOPROXY="file://$tmp/proxy,file://$cache/cache/download,$upstream" "$@" || status=$?
if [ -f go.sum ]; then
	grep -v '^github\.com/retrysafe/retrysafe[/ ]' go.sum >"$tmp/go.sum" || :
	cat "$tmp/go.sum" >go.sum
fi
exit "$status"
