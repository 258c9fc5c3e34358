#!/usr/bin/env bash
# One idempotent setup behind `make run` and `make test`: Debian tools, Java, the Python venv
# with the locked dependency set, the Maven-resolved RocketMQ jars and the platform's Java module.
# Each step is skipped when its inputs are unchanged, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
say() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# --- Debian tools the platform uses (cluster: java, mvn, gcc; noise: fio, redis; netns: ip; link faults: conntrack; report test: chromium;
#     docker backend: Debian's engine and debootstrap for the offline image; per-node clocks: faketime) ---
apt_updated=0
need_pkgs=()
PATH=$PATH:/usr/sbin:/sbin  # dockerd and debootstrap live there, off a normal user's PATH
for pair in fio:fio redis-server:redis-server ip:iproute2 gcc:gcc mvn:maven java:openjdk-17-jdk-headless javac:openjdk-17-jdk-headless ss:iproute2 conntrack:conntrack tcpdump:tcpdump pgrep:procps chromium:chromium dockerd:docker.io debootstrap:debootstrap faketime:faketime perf:linux-perf; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing tools (${need_pkgs[*]}); install them with apt-get as root"
  say "installing Debian packages: ${need_pkgs[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && apt_updated=1
  # No service is started by these installs (policy-rc.d exit 101, unless the host already has a
  # policy): Debian's docker.io would start a dockerd with its default bridge and NAT rules, and the
  # platform starts its own engine without them (`rmqchaos docker up`) and its own redis instances.
  policy=/usr/sbin/policy-rc.d; own_policy=0
  if [ ! -e $policy ]; then printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy && own_policy=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null \
    || { [ $own_policy = 0 ] || rm -f $policy; die "apt-get install ${need_pkgs[*]} failed"; }
  [ $own_policy = 0 ] || rm -f $policy
  # and not at the next boot either: the docker units we just installed stay disabled
  if [[ " ${need_pkgs[*]} " == *" docker.io "* ]] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable docker.service docker.socket >/dev/null 2>&1 || true
  fi
fi
# Debian enables a redis-server service on install (started at the next boot); the platform runs its own.
if [ $apt_updated = 1 ] && command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now redis-server >/dev/null 2>&1 || true
fi

java_major=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}' | awk -F. '{print ($1 == 1) ? $2 : $1}')
[ -n "$java_major" ] && [ "$java_major" -ge 11 ] || die "java ${java_major:-missing} found; RocketMQ here needs Java 11+ (apt-get install openjdk-17-jdk-headless)"

# --- Python venv with the exact locked set ---
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
venv_key=$(cat requirements.lock pyproject.toml | sha256sum | cut -c1-16)
if ! stamp_ok .venv/.setup-stamp "$venv_key" || [ ! -x .venv/bin/python ]; then
  say "creating .venv (pinned dependencies from requirements.lock; first time takes a few minutes)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/pip install -q -r requirements.lock
  .venv/bin/pip install -q --no-deps -e .
  echo "$venv_key" > .venv/.setup-stamp
fi

# --- RocketMQ jars (pinned in pom.xml) + the platform's Java module, built against that version ---
# rmqchaos/rocketmq/dist.py: the one Maven resolution (any other version resolves the same way on first use)
RMQ_VERSION=${ROCKETMQ_VERSION:-$(sed -n 's:.*<rocketmq.version>\(.*\)</rocketmq.version>.*:\1:p' pom.xml | head -1)}
.venv/bin/python -m rmqchaos.rocketmq.dist "$RMQ_VERSION" >/dev/null || exit 1  # its error is one line
# and the versions the upstream-bug corpus runs on (scenarios/upstream/: each names its own), so the
# corpus validates against each version's own jars without a first-use wait (~100 s each, once)
for v in $(sed -n 's/^ *rocketmq_version: *\([0-9][0-9.]*\).*/\1/p' scenarios/upstream/*.yaml | sort -u); do
  .venv/bin/python -m rmqchaos.rocketmq.dist "$v" >/dev/null || exit 1
done

# --- LD_PRELOAD shim that keeps every listener of our JVMs on loopback ---
SHIM=.cache/native/libloopback_bind.so
if [ ! -f "$SHIM" ] || [ cluster/native/loopback_bind.c -nt "$SHIM" ]; then
  say "building $SHIM"
  mkdir -p .cache/native
  gcc -O2 -Wall -shared -fPIC -o "$SHIM" cluster/native/loopback_bind.c -ldl
fi
# --- the send ledger's lines in C (rmqchaos/ledger/lines.py; without it, the same bytes from Python) ---
EXT=rmqchaos/ledger/_send_lines$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
if [ ! -f "$EXT" ] || [ rmqchaos/ledger/native/send_lines.c -nt "$EXT" ]; then
  say "building $EXT"
  gcc -O2 -Wall -shared -fPIC -I"$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
      -o "$EXT" rmqchaos/ledger/native/send_lines.c || die "could not build $EXT (gcc and Python's headers)"
fi
# --- Toxiproxy for link faults (latency, bandwidth, blackhole, reset: there is no netem here), built from
#     the Go module proxy; without Go, link faults refuse with one line and everything else works ---
TOXIPROXY_VERSION=v2.12.0  # cluster/net/toxiproxy.py VERSION
TP=.cache/toxiproxy
if ! stamp_ok "$TP/.setup-stamp" "$TOXIPROXY_VERSION" || [ ! -x "$TP/bin/toxiproxy-server" ]; then
  if command -v go >/dev/null 2>&1; then
    say "building toxiproxy-server $TOXIPROXY_VERSION with $(go env GOVERSION) into $TP"
    rm -rf "$TP/bin"
    # Go's own module and build caches (~/go, ~/.cache/go-build): a fresh clone builds in seconds
    GOBIN=$ROOT/$TP/bin GOFLAGS=-modcacherw go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" >"$ROOT/.cache/toxiproxy.log" 2>&1 \
      || { tail -5 .cache/toxiproxy.log >&2; die "could not build toxiproxy-server (see .cache/toxiproxy.log)"; }
    mv "$TP/bin/server" "$TP/bin/toxiproxy-server"
    echo "$TOXIPROXY_VERSION" > "$TP/.setup-stamp"
  else
    say "go not found: toxiproxy-server not built, link faults unavailable (apt-get install golang-go)"
  fi
fi
# --- powerfs, the FUSE layer that forgets unsynced writes (docs/powerfs.md; cluster/substrate/powerfs.py), built
#     from powerfs/ (go-fuse pinned in its go.mod); without Go, power loss is refused in one line ---
PF=.cache/powerfs
pf_key=$(cat powerfs/go.mod powerfs/go.sum powerfs/*.go | sha256sum | cut -c1-16)
if ! stamp_ok "$PF/.setup-stamp" "$pf_key" || [ ! -x "$PF/bin/powerfs" ]; then
  if command -v go >/dev/null 2>&1; then
    say "building powerfs with $(go env GOVERSION) into $PF"
    mkdir -p "$PF/bin"
    (cd powerfs && GOFLAGS=-modcacherw go build -o "$ROOT/$PF/bin/powerfs" .) >"$ROOT/.cache/powerfs.log" 2>&1 \
      || { tail -5 .cache/powerfs.log >&2; die "could not build powerfs (see .cache/powerfs.log)"; }
    echo "$pf_key" > "$PF/.setup-stamp"
  else
    say "go not found: powerfs not built, power loss and disk errors unavailable (apt-get install golang-go)"
  fi
fi
# --- the embedded Airflow: metadata DB (SQLite under $RMQCHAOS_HOME/airflow) and the cluster pool ---
.venv/bin/rmqchaos airflow init >/dev/null || die "could not initialise the embedded Airflow"
say "ready: RocketMQ $RMQ_VERSION, $(java -version 2>&1 | head -1), $(.venv/bin/python --version)"
