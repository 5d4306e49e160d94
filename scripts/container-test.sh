#!/usr/bin/env bash
# The container image, the compose file and the systemd unit, checked for real with podman:
#  1. podman, runc, debootstrap and podman-compose from Debian if missing (as root);
#  2. a Debian base made with debootstrap from this machine's mirror, cached between runs
#     (scripts/container-base.sh), since there is no registry to pull one from;
#  3. `cargo build --release --locked`, then the image from it (`--target prebuilt`);
#  4. the container: healthy by its HEALTHCHECK, an imagine finished through the published
#     port, restarted with its volume and the task still there, stopped cleanly (exit 0 within
#     the stop timeout);
#  5. deploy/easel.service through `systemd-analyze verify` and `security`;
#  6. deploy/compose.yaml with podman-compose, PostgreSQL and the S3 server built locally: a
#     task submitted to the api node, finished by the worker node, its images served by both.
# Where podman cannot run, it says so in one line and exits 0, except under CI=true, where it
# fails. Prints how long each part took. Run from anywhere inside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

skip() {
  if [ "${CI:-}" = true ]; then
    echo "container-test: $1 (CI=true: this may not be skipped)" >&2
    exit 1
  fi
  echo "container-test: skipped: $1"
  exit 0
}

timings=()
mark=$SECONDS
took() {
  timings+=("$(printf '%-44s %4ss' "$1" $((SECONDS - mark)))")
  mark=$SECONDS
}

# 1. The tools.
missing=()
for tool in podman runc debootstrap podman-compose; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    skip "podman is not installed (${missing[*]} missing) and this is not root on Debian"
  fi
  echo "== installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap podman-compose >/dev/null
fi
[ "$(id -u)" = 0 ] || skip "the base image is made with debootstrap, which needs root"
cache="${EASEL_IMAGE_CACHE:-$HOME/.cache/easel-images}"
mkdir -p "$cache"
# podman's default limits are above some sandboxes' hard limits (runc then refuses to start
# anything): ask for less, in a file of our own rather than the system's. runc is named, as
# crun fails on hosts that mix cgroup v1 and v2.
cat >"$cache/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$cache/containers.conf"
# podman's complaints that there is no systemd to run healthcheck timers (wait_healthy runs the
# checks itself) go here rather than to the terminal.
noise="$cache/podman-stderr.log"
: >"$noise"
podman info >/dev/null 2>&1 || skip "podman does not work here: $(podman info 2>&1 | tail -1)"
took "tools"

# 2. The base image.
echo "== base image"
base="$(bash scripts/container-base.sh | tail -1)"
podman run --rm --network none "$base" true 2>/dev/null ||
  skip "podman cannot run a container here: $(podman run --rm --network none "$base" true 2>&1 | tail -1)"
took "base image (debootstrap or cache)"

# 3. The binary and the image.
echo "== cargo build --release --locked"
cargo build --release --locked
built="${CARGO_TARGET_DIR:-target}/release/easel"
if [ "$(realpath "$built")" != "$(realpath -m target/release/easel)" ]; then
  mkdir -p target/release && cp "$built" target/release/easel
fi
took "cargo build --release"

echo "== podman build --target prebuilt"
image=localhost/easel:container-test
commit="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
podman build -q --format docker --target prebuilt --build-arg RUNTIME_IMAGE="$base" \
  --build-arg EASEL_COMMIT="$commit" -t "$image" . >/dev/null
size="$(podman image inspect --format '{{.Size}}' "$image")"
binary_size="$(stat -c %s target/release/easel)"
took "podman build (prebuilt)"

name=easel-container-test
volume=easel-container-test-data
project=easel-container-test
cleanup() {
  podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
  podman volume rm -f "$volume" >/dev/null 2>&1 || true
  if [ -n "${compose_env:-}" ]; then
    (cd deploy && env $compose_env podman-compose -p "$project" -f compose.yaml down -v >/dev/null 2>&1) || true
  fi
}
trap cleanup EXIT
cleanup

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
json() { python3 -c "import json, sys; v = json.load(sys.stdin); print($1)"; }

# Until the container's HEALTHCHECK passes. podman runs healthchecks from systemd timers, which
# a host without systemd lacks, so the check is also run here, as the timer would.
wait_healthy() {
  local container="$1" i
  for i in $(seq 1 120); do
    podman healthcheck run "$container" >/dev/null 2>>"$noise" || true
    if [ "$(podman inspect --format '{{.State.Health.Status}}' "$container")" = healthy ]; then
      return 0
    fi
    sleep 0.5
  done
  echo "container-test: $container is not healthy; its log:" >&2
  podman logs "$container" >&2 || true
  return 1
}

# Every image of the record on stdin answers 200 as a PNG at BASE (the record's URLs are on
# the public_url, so only their paths are kept).
check_images() {
  local base="$1" record="$2" url
  for url in $(echo "$record" | json '"\n".join([v["original_image_url"]] + v["image_urls"])'); do
    ctype="$(curl -sf -o /dev/null -w '%{content_type}' "$base/files/${url#*/files/}")" || {
      echo "container-test: $base did not serve ${url#*/files/}" >&2
      return 1
    }
    [ "$ctype" = image/png ] || { echo "container-test: $url is $ctype" >&2; return 1; }
  done
}

# 4. The container.
echo "== the container"
port="$(free_port)"
start=$(date +%s.%N)
podman run -d --name "$name" -p "127.0.0.1:$port:8080" -v "$volume:/data" \
  -e EASEL_PUBLIC_URL="http://127.0.0.1:$port" -e EASEL_IMAGE_SIZE=256 "$image" >/dev/null 2>>"$noise"
wait_healthy "$name"
echo "healthy $(python3 -c "import time; print(f'{time.time() - $start:.1f}')") s after podman run"
[ "$(podman exec "$name" id -u)" != 0 ] || { echo "container-test: easel runs as root" >&2; exit 1; }
podman run --rm "$image" --version 2>>"$noise" | grep -q "($commit)" ||
  { echo "container-test: --version does not name $commit" >&2; exit 1; }
key="$(podman logs "$name" 2>/dev/null | grep -o 'easel_[A-Za-z0-9_-]*' | head -1)"
[ -n "$key" ] || { echo "container-test: no first key in the log" >&2; exit 1; }
api="http://127.0.0.1:$port/api/v1"
record="$(curl -sf "$api/imagine" -H "Authorization: $key" -H 'Content-Type: application/json' \
  -H 'Prefer: wait=60' -d '{"prompt": "a red lighthouse at dusk"}')"
task="$(echo "$record" | json 'v["task_id"]')"
[ "$(echo "$record" | json 'v["status"]')" = finished ] ||
  { echo "container-test: the task did not finish: $record" >&2; exit 1; }
check_images "http://127.0.0.1:$port" "$record"
took "container: start, healthy, imagine"

podman restart -t 15 "$name" >/dev/null 2>>"$noise"
wait_healthy "$name"
record="$(curl -sf "$api/fetch" -H "Authorization: $key" -H 'Content-Type: application/json' \
  -d "{\"task_id\": \"$task\"}")"
[ "$(echo "$record" | json 'v["status"]')" = finished ] ||
  { echo "container-test: the task is not there after a restart: $record" >&2; exit 1; }
check_images "http://127.0.0.1:$port" "$record"
took "container: restart, task kept by the volume"

stop_start=$SECONDS
podman stop -t 15 "$name" >/dev/null 2>>"$noise"
stopped_in=$((SECONDS - stop_start))
code="$(podman inspect --format '{{.State.ExitCode}}' "$name")"
[ "$code" = 0 ] && [ "$stopped_in" -lt 15 ] ||
  { echo "container-test: stop: exit $code after ${stopped_in}s (want 0 within 15s)" >&2; exit 1; }
echo "stopped cleanly in ${stopped_in}s"
podman rm -f "$name" >/dev/null 2>>"$noise"
took "container: stop"

# 5. The systemd unit (its ExecStart pointed at the binary just built, which verify looks for).
if command -v systemd-analyze >/dev/null; then
  echo "== systemd unit"
  unit="$(mktemp -d)/easel.service"
  sed "s#/usr/local/bin/easel#$root/target/release/easel#" deploy/easel.service >"$unit"
  systemd-analyze verify "$unit"
  systemd-analyze security --offline=true --no-pager "$unit" | tail -1
  rm -rf "$(dirname "$unit")"
  took "systemd-analyze verify and security"
fi

# 6. The compose file, with PostgreSQL and the S3 server built from Debian and PyPI on the base
# (tagged by what made them, so later runs reuse them).
echo "== compose"
local_image() {
  local name="$1" file="deploy/images/$1.Containerfile" tag
  tag="$( (cat "$file" deploy/images/*.sh deploy/images/mc; podman image inspect --format '{{.Id}}' "$base") | sha256sum | cut -c1-16)"
  if ! podman image exists "localhost/easel-$name:$tag"; then
    local extra=()
    # Where the package index is reached through a proxy with its own CA, pip needs it.
    if [ -n "${PIP_CERT:-}" ] && [ -f "$PIP_CERT" ]; then
      extra=(-v "$PIP_CERT:/etc/ssl/host-ca.crt:ro" --build-arg PIP_CERT=/etc/ssl/host-ca.crt)
    fi
    podman build -q --network host --format docker --build-arg BASE_IMAGE="$base" "${extra[@]}" \
      -t "localhost/easel-$name:$tag" -f "$file" deploy/images >/dev/null
  fi
  echo "localhost/easel-$name:$tag"
}
postgres_image="$(local_image postgres)"
s3_image="$(local_image s3)"
took "compose: PostgreSQL and S3 images (or cache)"

api_port="$(free_port)"
worker_port="$(free_port)"
compose_env="EASEL_IMAGE=$image EASEL_POSTGRES_IMAGE=$postgres_image EASEL_S3_IMAGE=$s3_image"
compose_env+=" EASEL_S3_INIT_IMAGE=$s3_image EASEL_API_PORT=$api_port EASEL_WORKER_PORT=$worker_port"
compose_env+=" EASEL_PUBLIC_URL=http://127.0.0.1:$api_port"
compose_env+=" EASEL_POSTGRES_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
compose_env+=" EASEL_S3_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
(cd deploy && env $compose_env podman-compose -p "$project" -f compose.yaml up -d >"$cache/compose-up.log" 2>&1) || {
  cat "$cache/compose-up.log" >&2
  exit 1
}
api_node="${project}_easel-api_1"
worker_node="${project}_easel-worker_1"
wait_healthy "$api_node"
wait_healthy "$worker_node"
# What docker compose's `service_completed_successfully` would wait for: the bucket exists.
for _ in $(seq 1 120); do
  [ "$(podman inspect --format '{{.State.Status}}' "${project}_s3-bucket_1")" = exited ] && break
  sleep 0.5
done
[ "$(podman inspect --format '{{.State.ExitCode}}' "${project}_s3-bucket_1")" = 0 ] || {
  echo "container-test: the bucket was not made:" >&2
  podman logs "${project}_s3-bucket_1" >&2
  exit 1
}
took "compose: up, both nodes healthy, bucket made"

key="$(podman exec "$api_node" easel keys create --name container-test)"
record="$(curl -sf "http://127.0.0.1:$api_port/api/v1/imagine" -H "Authorization: $key" \
  -H 'Content-Type: application/json' -H 'Prefer: wait=60' \
  -d '{"prompt": "two towers by a green sea"}')" || {
  echo "container-test: the api node refused the submit; its log:" >&2
  podman logs "$api_node" >&2
  exit 1
}
[ "$(echo "$record" | json 'v["status"]')" = finished ] || {
  echo "container-test: the task did not finish: $record" >&2
  podman logs "$worker_node" >&2
  exit 1
}
# The api node runs no worker (EASEL_ROLES=api,dispatcher): the worker node finished it.
check_images "http://127.0.0.1:$api_port" "$record"
check_images "http://127.0.0.1:$worker_port" "$record"
podman logs "$api_node" >"$cache/compose-easel-api.log" 2>&1
podman logs "$worker_node" >"$cache/compose-easel-worker.log" 2>&1
took "compose: a task across the two nodes"

echo "== container-test: passed (image $((size / 1000000)) MB, binary $((binary_size / 1000000)) MB)"
printf '%s\n' "${timings[@]}"
