#!/bin/sh
# Release binaries of retrysafe, without make:
#
#	deploy/release.sh [VERSION]     # default: git describe of the root module's tags
#
# Builds static (CGO_ENABLED=0), trimmed binaries for linux/amd64,
# linux/arm64 and darwin/arm64 into dist/retrysafe-VERSION-OS-ARCH, and
# dist/SHA256SUMS. The version and the commit are stamped with -ldflags -X
# (the go command records neither in a build from a git worktree or in
# workspace mode); -buildvcs=true adds vcs.* to the build information
# where the go command can read them (GOFLAGS may say -buildvcs=false).
# "retrysafe version" prints them: the stamped version wins over the
# pseudo-version the go command records for a commit not tagged yet.
# TARGETS overrides the platform list, DIST the output directory. Tagging the modules is
# deploy/tag.sh's (docs/releasing.md).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
# --match: the root module's tags (v0.1.0), not the other modules'
# (store/sqlite/v0.1.0).
version=${1:-$(git -C "$root" describe --tags --match 'v[0-9]*' --always --dirty)}
revision=$(git -C "$root" rev-parse HEAD)
targets=${TARGETS:-"linux/amd64 linux/arm64 darwin/arm64"}
dist=${DIST:-"$root/dist"}
mkdir -p "$dist"

for target in $targets; do
	goos=${target%/*}
	goarch=${target#*/}
	out="$dist/retrysafe-$version-$goos-$goarch"
	CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -C "$root/cmd/retrysafe" \
		-trimpath -buildvcs=true \
		-ldflags "-s -w -X main.buildVersion=$version -X main.buildRevision=$revision" \
		-o "$out" .
	echo "built $out ($(wc -c < "$out") bytes)"
done

cd "$dist"
sha256sum retrysafe-"$version"-* > SHA256SUMS
cat SHA256SUMS
