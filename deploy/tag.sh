#!/usr/bin/env bash
# Give every module of the repository one version, then tag them all with it
# (docs/releasing.md):
#
#	deploy/tag.sh v0.2.0   # 1. sets the version: every go.mod requires its
#	                       #    siblings at v0.2.0, go.work replaces v0.2.0
#	                       #    with their directories. Run bash .ci/run, commit.
#	deploy/tag.sh v0.2.0   # 2. on that commit, clean: tags v0.2.0 (the root
#	                       #    module), store/sqlite/v0.2.0, gateway/v0.2.0, …
#	                       #    and prints the git push that publishes them.
#
# Step 1 is skipped when the tree is at the version already (v0.1.0: the
# first release). The modules are the ones go.work uses.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: deploy/tag.sh vX.Y.Z" >&2; exit 2; }
v=$1
[[ $v =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
	{ echo "tag.sh: $v is not a semantic version vX.Y.Z" >&2; exit 2; }
[[ $v =~ ^v[01]\. ]] || { echo "tag.sh: $v: a major version from v2 on needs a /vN suffix on every module path first" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

dirs=$(go list -m -f '{{.Dir}}' | sed "s|^$root\$|.|; s|^$root/||")

# siblings FILE: the requirements on modules of this repository in a go.mod
# ("path version" lines), or go.work's replacements ("path version dir").
siblings() {
	awk '/^(require|replace) \($/ {block=1; next} block && /^\)/ {block=0; next}
		block {print $1, $2, $4} /^(require|replace) [^(]/ {print $2, $3, $5}' "$1" |
		grep '^github\.com/retrysafe/retrysafe[/ ]' || :
}

changed=0
for d in $dirs; do
	if grep -q '^replace' "$d/go.mod"; then
		echo "tag.sh: $d/go.mod has a replace directive: a published go.mod must not (go install …@version refuses it)" >&2
		exit 1
	fi
	while read -r path version _; do
		if [ "$version" != "$v" ]; then
			(cd "$d" && go mod edit -require="$path@$v")
			changed=1
		fi
	done < <(siblings "$d/go.mod")
done
while read -r path version _; do
	if [ "$version" != "$v" ]; then
		# In place, so that go.work keeps its comments and its grouping.
		sed -i.bak -E "s#^([[:space:]]*(replace )?$path) $version => #\1 $v => #" go.work && rm go.work.bak
		changed=1
	fi
done < <(siblings go.work)
if [ "$changed" = 1 ]; then
	echo "Every module now requires its siblings at $v (go.mod files and go.work changed)."
	echo "Run bash .ci/run, commit, then run deploy/tag.sh $v again to tag that commit."
	exit 0
fi

if [ -n "$(git status --porcelain)" ]; then
	echo "tag.sh: the working tree has uncommitted changes; tags name a commit" >&2
	exit 1
fi
tags=()
for d in $dirs; do
	if [ "$d" = . ]; then tags+=("$v"); else tags+=("$d/$v"); fi
done
for t in "${tags[@]}"; do
	if git rev-parse -q --verify "refs/tags/$t" >/dev/null; then
		echo "tag.sh: tag $t exists already" >&2
		exit 1
	fi
done
for t in "${tags[@]}"; do
	git tag -a -m "retrysafe $v" "$t"
done
echo "Tagged $(git rev-parse --short HEAD) with ${tags[*]}."
echo "Publish them together:"
echo "  git push origin ${tags[*]}"
