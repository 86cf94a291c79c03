#!/bin/sh
# Builds the retrysafe gateway image without pulling anything: a static
# binary from the local Go toolchain, the host's Debian CA certificates,
# and an empty /tmp and /data, then docker build on deploy/Dockerfile.
#
#	deploy/build-image.sh [TAG]        # default tag: retrysafe:VERSION
#
# Environment: VERSION (default: git describe), DOCKER (default: docker),
# CA_FILE (default: /etc/ssl/certs/ca-certificates.crt, from Debian's
# ca-certificates package), TAGS (Go build tags, e.g.
# TAGS=retrysafe_nopostgres,retrysafe_nomysql,retrysafe_noredis,retrysafe_nodynamodb,retrysafe_notracing
# for a smaller image with only the SQLite and memory stores and no tracing).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
revision=$(git -C "$root" rev-parse HEAD)
version=${VERSION:-$(git -C "$root" describe --tags --always --dirty)}
tag=${1:-retrysafe:$version}
docker=${DOCKER:-docker}
ca_file=${CA_FILE:-/etc/ssl/certs/ca-certificates.crt}

if [ ! -s "$ca_file" ]; then
	echo "build-image.sh: $ca_file is missing: apt-get install ca-certificates, or set CA_FILE" >&2
	exit 1
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/retrysafe-image-XXXXXX")
trap 'rm -rf "$ctx"' EXIT

# Linux binary for the daemon's architecture (GOARCH from the environment
# wins, e.g. GOARCH=arm64 with a cross-building daemon).
arch=${GOARCH:-$(go env GOARCH)}
CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -C "$root/cmd/retrysafe" \
	-trimpath -buildvcs=true -tags "${TAGS:-}" -ldflags "-s -w -X main.buildVersion=$version -X main.buildRevision=$revision" \
	-o "$ctx/retrysafe" .

cp "$ca_file" "$ctx/ca-certificates.crt"
mkdir -p "$ctx/rootfs/tmp" "$ctx/data"
chmod 0755 "$ctx/rootfs"
chmod 1777 "$ctx/rootfs/tmp"
chmod 0700 "$ctx/data"

"$docker" build -f "$root/deploy/Dockerfile" \
	--build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
	-t "$tag" "$ctx"
echo "built $tag ($version, revision $revision)"
