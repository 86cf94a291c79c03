#!/usr/bin/env bash
# Tests the gateway image end to end on this machine: every container runs
# with --network host on free 127.0.0.1 ports, so every connection stays on
# the loopback interface. Build the image first, then:
#
#	deploy/build-image.sh retrysafe:test
#	bash deploy/test-image.sh retrysafe:test     # default: retrysafe:$(git describe)
#
# It checks, failing at the first mismatch:
#   - the image: non-root user, the HEALTHCHECK runs "retrysafe health" (it
#     asks RETRYSAFE_ADMIN_LISTEN, as serve listens there: moving the admin
#     port moves the check), the
#     OCI version and revision labels;
#   - the image's own default command (no arguments: CMD as shipped, which
#     listens on 0.0.0.0 without a token file) starts and turns healthy by
#     its own HEALTHCHECK, in a network namespace of its own (--network
#     none), so its fixed ports 8080 and 9090 clash with nothing here;
#   - SQLite on a mounted volume, in front of a test upstream that counts
#     executions (internal/countingupstream): a replay answers the same
#     body with Idempotent-Replayed: true and the upstream ran once; another
#     body with the same key is 422; the process in the container is not
#     root; SIGTERM stops it with status 0; a new container on the same
#     volume (read-only root, as in deploy/kubernetes) still replays;
#   - the same replay through the local PostgreSQL (an own schema, dropped
#     afterwards) and the local Redis (an own key prefix, deleted afterwards);
#   - the health check flips: a gateway on a Redis of its own (never the
#     shared one) is healthy, turns unhealthy with /readyz 503 and refuses
#     new requests (503) when that Redis is killed, and recovers when it
#     comes back;
#   - deploy/retrysafe.service passes systemd-analyze verify, with the image's
#     binary installed at a temporary path.
#
# Environment: DOCKER (default docker), RETRYSAFE_POSTGRES_URL (default
# postgres://postgres@127.0.0.1:5432/test?sslmode=disable),
# RETRYSAFE_REDIS_ADDR (default 127.0.0.1:6379). Needs curl, psql,
# redis-server, redis-cli, ss, systemd-analyze and go.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
image=${1:-retrysafe:$(git describe --tags --always --dirty)}
docker=${DOCKER:-docker}
pg_url=${RETRYSAFE_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
redis_addr=${RETRYSAFE_REDIS_ADDR:-127.0.0.1:6379}

run_id=$(od -An -N5 -tx1 /dev/urandom | tr -d ' \n')
label="retrysafe-image-test=$run_id"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/retrysafe-image-test-XXXXXX")
volume="retrysafe-image-test-$run_id"
pg_schema="rs_image_test_$run_id"
redis_prefix="rs-image-test-$run_id:"
upstream_pid="" own_redis_pid="" pg_used="" redis_used="" used_ports=" "
a="" p="" rp="" # admin, proxy and own Redis ports (free_port)
passed=0

log() { printf '\n-- %s\n' "$*"; }
pass() {
	passed=$((passed + 1))
	echo "ok: $*"
}
fail() {
	echo "test-image.sh: FAIL: $*" >&2
	exit 1
}
need() {
	command -v "$1" >/dev/null 2>&1 || fail "$1 is missing (${2:-install it})"
}

# on_exit shows what the containers said when the test failed, then
# removes everything the test made.
on_exit() {
	local rc=$? c
	set +e
	if [ "$rc" -ne 0 ]; then
		for c in $("$docker" ps -aq --filter "label=$label"); do
			echo "== logs of $("$docker" inspect -f '{{.Name}}' "$c") (last 40 lines)" >&2
			"$docker" logs --tail 40 "$c" >&2 2>&1
			"$docker" inspect -f '{{if .State.Health}}health: {{json .State.Health}}{{end}}' "$c" >&2
		done
	fi
	for c in $("$docker" ps -aq --filter "label=$label"); do
		"$docker" rm -f -v "$c" >/dev/null
	done
	"$docker" volume rm -f "$volume" >/dev/null 2>&1
	[ -n "$upstream_pid" ] && kill "$upstream_pid" 2>/dev/null && wait "$upstream_pid" 2>/dev/null
	[ -n "$own_redis_pid" ] && kill "$own_redis_pid" 2>/dev/null && wait "$own_redis_pid" 2>/dev/null
	[ -n "$pg_used" ] && PGOPTIONS='-c client_min_messages=warning' psql "$pg_url" -qtAc "DROP SCHEMA IF EXISTS $pg_schema CASCADE" >/dev/null
	[ -n "$redis_used" ] && redis-cli -h "${redis_addr%:*}" -p "${redis_addr##*:}" --scan --pattern "${redis_prefix}*" |
		xargs -r redis-cli -h "${redis_addr%:*}" -p "${redis_addr##*:}" del >/dev/null
	rm -rf "$tmp"
	[ "$rc" -ne 0 ] && echo "test-image.sh: failed after $passed passed checks" >&2
	exit "$rc"
}
trap on_exit EXIT

for tool in curl psql redis-server redis-cli ss go od; do need "$tool"; done
need systemd-analyze "apt-get install systemd"
"$docker" image inspect "$image" >/dev/null 2>&1 || fail "no image $image: run deploy/build-image.sh $image first"

# free_port VAR sets VAR to a TCP port that no socket uses (listening or
# not) and that this run has not handed out yet, below the kernel's
# ephemeral range, so that no outgoing connection takes it before the
# gateway binds it.
read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range
port_low=20000 port_high=$((ephemeral_low - 1))
[ "$port_high" -gt $((port_low + 1000)) ] || port_low=1024
free_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((port_low + RANDOM % (port_high - port_low)))
		case "$used_ports" in *" $port "*) continue ;; esac
		if [ -z "$(ss -Htan "sport = :$port")" ]; then
			used_ports="$used_ports$port "
			printf -v "$1" %s "$port"
			return
		fi
	done
	fail "found no free port between $port_low and $port_high"
}

# header FILE NAME prints the value of header NAME (any case) in FILE, a
# curl -D dump, without the trailing CR.
header() {
	awk -v n="$2" 'BEGIN { n = tolower(n) } { sub(/\r$/, "") } tolower(substr($0, 1, length(n) + 1)) == n ":" { v = substr($0, length(n) + 2); sub(/^[ \t]+/, "", v); print v }' "$1" | tail -n 1
}

# request METHOD URL KEY BODY OUT sends a JSON request as one caller (the
# scope; a keyed request without one gets 400 empty-scope), with an
# Idempotency-Key unless KEY is empty, keeps the answer in OUT.body and
# OUT.headers, and prints the status code.
request() {
	local args=(-sS --max-time 15 -X "$1" -o "$5.body" -D "$5.headers" -w '%{http_code}'
		-H 'Content-Type: application/json' -H 'Authorization: Bearer image-test' --data-binary "$4")
	[ -n "$3" ] && args+=(-H "Idempotency-Key: $3")
	curl "${args[@]}" "$2" || true
}

# executions KEY prints how many times the upstream ran KEY.
executions() {
	curl -fsS --max-time 5 "http://$upstream/executions?key=$1"
}

# gateway NAME ADMIN_PORT STORE PROXY_PORT [docker run options...] starts a
# gateway container in front of the test upstream and waits until its
# /readyz answers 200.
gateway() {
	local name=$1 admin=$2 store=$3 proxy=$4
	shift 4
	"$docker" run -d --name "$name" --label "$label" --network host \
		--cap-drop ALL --security-opt no-new-privileges "$@" "$image" \
		serve --listen "127.0.0.1:$proxy" --admin-listen "127.0.0.1:$admin" \
		--upstream "http://$upstream" --store "$store" >/dev/null
	wait_ready "$name" "$admin"
}

# wait_ready NAME ADMIN_PORT waits up to 30s for the container's /readyz.
wait_ready() {
	for _ in $(seq 1 60); do
		if curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$2/readyz" 2>/dev/null; then
			return
		fi
		if [ "$("$docker" inspect -f '{{.State.Running}}' "$1")" != true ]; then
			fail "container $1 exited before /readyz answered: $("$docker" logs --tail 20 "$1" 2>&1)"
		fi
		sleep 0.5
	done
	fail "container $1: /readyz did not answer 200 within 30s"
}

# replay_check NAME PROXY_PORT: a new key runs once and its replay answers
# the same status and body with Idempotent-Replayed: true; the same key
# with another body is 422. The first answer stays in $tmp/NAME.first.
replay_check() {
	local name=$1 url="http://127.0.0.1:$2/payments" key="image-test-$run_id-$1" status
	status=$(request POST "$url" "$key" '{"amount":4990,"currency":"UAH"}' "$tmp/$name.first")
	[ "$status" = 201 ] || fail "$name: first POST answered $status, want 201: $(cat "$tmp/$name.first.body" 2>/dev/null)"
	[ -z "$(header "$tmp/$name.first.headers" Idempotent-Replayed)" ] || fail "$name: the first POST says it was replayed"
	status=$(request POST "$url" "$key" '{"amount":4990,"currency":"UAH"}' "$tmp/$name.again")
	[ "$status" = 201 ] || fail "$name: replay answered $status, want 201"
	[ "$(header "$tmp/$name.again.headers" Idempotent-Replayed)" = true ] ||
		fail "$name: replay has Idempotent-Replayed: '$(header "$tmp/$name.again.headers" Idempotent-Replayed)', want true"
	cmp -s "$tmp/$name.first.body" "$tmp/$name.again.body" ||
		fail "$name: replayed body differs: $(cat "$tmp/$name.first.body") vs $(cat "$tmp/$name.again.body")"
	[ "$(executions "$key")" = 1 ] || fail "$name: the upstream ran key $key $(executions "$key") times, want 1"
	status=$(request POST "$url" "$key" '{"amount":9990,"currency":"UAH"}' "$tmp/$name.other")
	[ "$status" = 422 ] || fail "$name: another body with the same key answered $status, want 422"
	[ "$(executions "$key")" = 1 ] || fail "$name: after the 422 the upstream ran key $key $(executions "$key") times, want 1"
	pass "$name: replay with Idempotent-Replayed: true, same body $(head -c 60 "$tmp/$name.first.body")..., upstream ran once, 422 for another body"
}

# health NAME prints the container's health status.
health() {
	"$docker" inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$1"
}

# wait_health NAME STATUS waits up to 40s for the container's health
# status, and prints how many seconds it took.
wait_health() {
	local start=$SECONDS
	for _ in $(seq 1 80); do
		if [ "$(health "$1")" = "$2" ]; then
			echo $((SECONDS - start))
			return
		fi
		sleep 0.5
	done
	fail "container $1: health is $(health "$1") after 40s, want $2; last check: $("$docker" inspect -f '{{with .State.Health}}{{range .Log}}{{println "exit" .ExitCode .Output}}{{end}}{{end}}' "$1" | tail -n 2)"
}

log "image $image"
size=$("$docker" image inspect -f '{{.Size}}' "$image")
echo "size: $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.1f MB", s / 1e6 }'))"
user=$("$docker" image inspect -f '{{.Config.User}}' "$image")
[ "$user" = 65532:65532 ] || fail "image user is '$user', want 65532:65532"
hc=$("$docker" image inspect -f '{{json .Config.Healthcheck.Test}}' "$image")
[ "$hc" = '["CMD","/retrysafe","health"]' ] || fail "image HEALTHCHECK is $hc"
version=$("$docker" image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}}' "$image")
revision=$("$docker" image inspect -f '{{index .Config.Labels "org.opencontainers.image.revision"}}' "$image")
[[ "$revision" =~ ^[0-9a-f]{40}$ ]] || fail "revision label '$revision' is not a commit"
if [ -z "$version" ] || [ "$version" = unknown ]; then fail "version label is '$version'"; fi
pass "image: user $user, HEALTHCHECK $hc, version $version, revision $revision"

log "the image's default command"
default_name=rs-default-$run_id
"$docker" run -d --name "$default_name" --label "$label" --network none \
	--cap-drop ALL --security-opt no-new-privileges "$image" >/dev/null
took=$(wait_health "$default_name" healthy)
"$docker" exec "$default_name" /retrysafe health --admin http://127.0.0.1:9090 ||
	fail "the default command's /readyz does not answer 200"
args=$("$docker" inspect -f '{{json .Config.Cmd}}' "$default_name")
default_log=$("$docker" logs "$default_name" 2>&1)
grep -q '"msg":"gateway started"' <<<"$default_log" || fail "the default command did not log its start: $default_log"
"$docker" rm -f "$default_name" >/dev/null
pass "default command $args: started, healthy after ${took}s by the image's own HEALTHCHECK"

# The admin address moved by RETRYSAFE_ADMIN_LISTEN: serve listens there and
# the image's HEALTHCHECK (retrysafe health, no flag) follows it.
"$docker" run -d --name "$default_name" --label "$label" --network none \
	--cap-drop ALL --security-opt no-new-privileges -e RETRYSAFE_ADMIN_LISTEN=0.0.0.0:9191 "$image" >/dev/null
took=$(wait_health "$default_name" healthy)
"$docker" exec "$default_name" /retrysafe health --admin http://127.0.0.1:9191 ||
	fail "RETRYSAFE_ADMIN_LISTEN=0.0.0.0:9191: /readyz on 9191 does not answer 200"
if "$docker" exec "$default_name" /retrysafe health --admin http://127.0.0.1:9090 2>/dev/null; then
	fail "RETRYSAFE_ADMIN_LISTEN=0.0.0.0:9191: something still answers on 9090"
fi
"$docker" rm -f "$default_name" >/dev/null
pass "default command with RETRYSAFE_ADMIN_LISTEN=0.0.0.0:9191: admin on 9191, healthy after ${took}s by the same HEALTHCHECK"

log "test upstream"
go build -o "$tmp/countingupstream" ./internal/countingupstream
"$tmp/countingupstream" --listen 127.0.0.1:0 --addr-file "$tmp/upstream.addr" &
upstream_pid=$!
for _ in $(seq 1 50); do [ -s "$tmp/upstream.addr" ] && break; sleep 0.2; done
[ -s "$tmp/upstream.addr" ] || fail "the test upstream did not start"
upstream=$(cat "$tmp/upstream.addr")
echo "counting upstream on $upstream"

log "SQLite on a mounted volume"
sqlite_name=rs-sqlite-$run_id sqlite_new_name=rs-sqlite2-$run_id
"$docker" volume create --label "$label" "$volume" >/dev/null
free_port a
free_port p
gateway "$sqlite_name" "$a" sqlite:/data/retrysafe.db "$p" -v "$volume:/data"
replay_check sqlite "$p"

pid=$("$docker" inspect -f '{{.State.Pid}}' "$sqlite_name")
[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -d' ' -f1-2)" = "/retrysafe serve" ] || fail "host pid $pid is not the gateway: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
uids=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")
gids=$(awk '/^Gid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")
if [ "$uids" != "65532 65532 65532 65532" ] || [ "$gids" != "65532 65532 65532 65532" ]; then
	fail "gateway process runs with uids $uids, gids $gids, want 65532 for all"
fi
caps=$(awk '/^CapEff:/ { print $2 }' "/proc/$pid/status")
[ "$caps" = 0000000000000000 ] || fail "gateway process has capabilities $caps"
pass "non-root: host pid $pid runs /retrysafe serve with uid/gid 65532 (real, effective, saved, fs), no capabilities"

mountpoint=$("$docker" volume inspect -f '{{.Mountpoint}}' "$volume")
[ -s "$mountpoint/retrysafe.db" ] || fail "no SQLite file in the volume ($mountpoint)"
[ "$(stat -c %u "$mountpoint/retrysafe.db")" = 65532 ] || fail "the SQLite file is owned by uid $(stat -c %u "$mountpoint/retrysafe.db")"

"$docker" stop -t 20 "$sqlite_name" >/dev/null
code=$("$docker" inspect -f '{{.State.ExitCode}}' "$sqlite_name")
[ "$code" = 0 ] || fail "after docker stop (SIGTERM) the gateway exited with $code, want 0"
"$docker" rm "$sqlite_name" >/dev/null
pass "docker stop: SIGTERM, exit status 0; the SQLite file stays in volume $volume"

free_port a
free_port p
gateway "$sqlite_new_name" "$a" sqlite:/data/retrysafe.db "$p" -v "$volume:/data" --read-only --tmpfs /tmp
status=$(request POST "http://127.0.0.1:$p/payments" "image-test-$run_id-sqlite" '{"amount":4990,"currency":"UAH"}' "$tmp/restart")
[ "$status" = 201 ] || fail "after the restart the replay answered $status, want 201"
[ "$(header "$tmp/restart.headers" Idempotent-Replayed)" = true ] || fail "after the restart the answer is not a replay"
cmp -s "$tmp/sqlite.first.body" "$tmp/restart.body" || fail "after the restart the replayed body differs"
[ "$(executions "image-test-$run_id-sqlite")" = 1 ] || fail "after the restart the upstream ran the key again"
pass "a new container (read-only root) on the same volume replays the same body; the upstream ran once"
"$docker" rm -f "$sqlite_new_name" >/dev/null

log "PostgreSQL (schema $pg_schema)"
postgres_name=rs-postgres-$run_id
case "$pg_url" in *\?*) sep='&' ;; *) sep='?' ;; esac
psql "$pg_url" -qtAc 'SELECT 1' >/dev/null || fail "PostgreSQL at $pg_url does not answer"
pg_used=1
free_port a
free_port p
gateway "$postgres_name" "$a" "$pg_url${sep}retrysafe_schema=$pg_schema" "$p"
replay_check postgres "$p"
rows=$(psql "$pg_url" -qtAc "SELECT count(*) FROM information_schema.tables WHERE table_schema = '$pg_schema'")
[ "$rows" -ge 1 ] || fail "no table in schema $pg_schema: the gateway did not use it"
"$docker" rm -f "$postgres_name" >/dev/null

log "Redis (prefix $redis_prefix)"
redis_name=rs-redis-$run_id
redis-cli -h "${redis_addr%:*}" -p "${redis_addr##*:}" ping | grep -qx PONG || fail "Redis at $redis_addr does not answer"
redis_used=1
free_port a
free_port p
gateway "$redis_name" "$a" "redis://$redis_addr/0?retrysafe_prefix=$redis_prefix" "$p"
replay_check redis "$p"
keys=$(redis-cli -h "${redis_addr%:*}" -p "${redis_addr##*:}" --scan --pattern "${redis_prefix}*" | wc -l)
[ "$keys" -ge 1 ] || fail "no key with prefix $redis_prefix: the gateway did not use it"
"$docker" rm -f "$redis_name" >/dev/null

log "health check when the store goes away (a Redis of our own)"
free_port a
free_port p
free_port rp
start_own_redis() {
	redis-server --bind 127.0.0.1 --port "$rp" --save "" --appendonly no --dir "$tmp" \
		--logfile "$tmp/own-redis.log" &
	own_redis_pid=$!
	for _ in $(seq 1 50); do
		redis-cli -p "$rp" ping 2>/dev/null | grep -qx PONG && return
		sleep 0.2
	done
	fail "own redis-server on port $rp did not start: $(tail -n 5 "$tmp/own-redis.log")"
}
start_own_redis
# With --network host the admin listener is on a free port, given the
# way the image reads it (RETRYSAFE_ADMIN_LISTEN), so the image's own
# HEALTHCHECK asks it; it checks every second here.
name=rs-health-$run_id
"$docker" run -d --name "$name" --label "$label" --network host --cap-drop ALL \
	--security-opt no-new-privileges -e RETRYSAFE_ADMIN_LISTEN="127.0.0.1:$a" \
	--health-interval 1s --health-timeout 3s --health-start-period 1s --health-retries 2 "$image" \
	serve --listen "127.0.0.1:$p" \
	--upstream "http://$upstream" --store "redis://127.0.0.1:$rp/0" >/dev/null
took=$(wait_health "$name" healthy)
pass "health: healthy after ${took}s"
replay_check health "$p"

{
	kill -KILL "$own_redis_pid"
	wait "$own_redis_pid" || true
} 2>/dev/null # no "Killed" line from the shell
own_redis_pid=""
took=$(wait_health "$name" unhealthy)
status=$(curl -sS --max-time 5 -o "$tmp/readyz.body" -w '%{http_code}' "http://127.0.0.1:$a/readyz")
[ "$status" = 503 ] || fail "/readyz answered $status with the store gone, want 503"
status=$(request POST "http://127.0.0.1:$p/payments" "image-test-$run_id-down" '{"amount":1}' "$tmp/down")
[ "$status" = 503 ] || fail "a new request with the store gone answered $status, want 503 (fail closed)"
[ "$(executions "image-test-$run_id-down")" = 0 ] || fail "with the store gone the upstream ran the request"
pass "store killed: unhealthy after ${took}s, /readyz 503 ($(head -c 120 "$tmp/readyz.body" | tr -d '\n')), new request 503, upstream not called"

start_own_redis
took=$(wait_health "$name" healthy)
status=$(request POST "http://127.0.0.1:$p/payments" "image-test-$run_id-back" '{"amount":2}' "$tmp/back1")
[ "$status" = 201 ] || fail "after the store came back a new request answered $status, want 201"
status=$(request POST "http://127.0.0.1:$p/payments" "image-test-$run_id-back" '{"amount":2}' "$tmp/back2")
if [ "$status" != 201 ] || [ "$(header "$tmp/back2.headers" Idempotent-Replayed)" != true ]; then
	fail "after the store came back the retry answered $status (replayed '$(header "$tmp/back2.headers" Idempotent-Replayed)')"
fi
[ "$(executions "image-test-$run_id-back")" = 1 ] || fail "after the store came back the upstream ran the key $(executions "image-test-$run_id-back") times"
pass "store back: healthy again after ${took}s; a new key runs once and replays"
"$docker" rm -f "$name" >/dev/null

log "systemd unit"
mkdir -p "$tmp/bin"
cid=$("$docker" create "$image")
"$docker" cp "$cid:/retrysafe" "$tmp/bin/retrysafe" >/dev/null
"$docker" rm "$cid" >/dev/null
"$tmp/bin/retrysafe" version
# The unit runs /usr/local/bin/retrysafe, which verify wants to exist: a
# copy of the unit runs the image's binary from the temporary directory.
sed "s#^ExecStart=/usr/local/bin/retrysafe #ExecStart=$tmp/bin/retrysafe #" deploy/retrysafe.service >"$tmp/retrysafe.service"
grep -q "^ExecStart=$tmp/bin/retrysafe serve" "$tmp/retrysafe.service" || fail "could not point ExecStart of the unit's copy at the binary"
if ! out=$(systemd-analyze verify "$tmp/retrysafe.service" 2>&1); then
	fail "systemd-analyze verify: $out"
fi
if grep -q retrysafe <<<"$out"; then
	fail "systemd-analyze verify complains about the unit: $out"
fi
pass "systemd-analyze verify deploy/retrysafe.service (ExecStart at the image's binary)"

log "done"
echo "image $image: $size bytes"
echo "image: $passed passed, 0 failed"
