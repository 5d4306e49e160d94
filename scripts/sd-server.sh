# Sourced by scripts/test.sh: a real stable-diffusion.cpp `sd-server` and a checkpoint for it,
# for the tests that run easel's openai and sdwebui backends against a real model server
# (tests/sd_server.rs). Exports EASEL_TEST_SD_SERVER (the binary) and EASEL_TEST_SD_MODEL (the
# checkpoint); the tests start the server themselves, as they need to kill and restart it.
#
# The server is not packaged as a binary anywhere these machines reach, but its whole source
# ships in the PyPI source distribution of stable-diffusion-cpp-python (vendor/stable-diffusion.cpp,
# examples/server). It is downloaded with pip, checked against its digest, and only the sd-server
# target is built with CMake from PyPI (no web frontend, no WebP/WebM). The checkpoint has
# Stable Diffusion 1.5's layout filled with seeded random numbers (scripts/sd-checkpoint.py):
# no model can be downloaded here, and none is committed.
#
# Both are kept in a cache outside the clone, keyed by the version and by the inputs that make
# them, so that only the first run on a machine builds (minutes) and writes (2 GB).
# Without a C++ compiler the tests that need the server are skipped with one line, except under
# CI=true, where this fails.

SD_CPP_PYPI_VERSION=0.4.7
SD_CPP_SDIST_SHA256=998d1957260dd5ae4e18a8acc0c14b0a8757aaa9f96515197b6d5bbf46df9282

sd_server_prepare() {
  local root="${EASEL_SD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/easel}"
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  # Native code for the machine that builds it: the cache belongs to that machine.
  local flags="-DCMAKE_BUILD_TYPE=Release -DSD_BUILD_EXAMPLES=ON -DSD_SERVER_BUILD_FRONTEND=OFF -DSD_WEBP=OFF -DSD_WEBM=OFF"
  local key
  key="$(printf '%s %s %s' "$SD_CPP_PYPI_VERSION" "$flags" "$(uname -m)" | sha256sum | cut -c1-12)"
  local dir="$root/sd-cpp-$SD_CPP_PYPI_VERSION-$key"
  local bin="$dir/bin/sd-server"
  local tools="$root/sd-tools"

  if [ ! -x "$tools/bin/python" ] || ! "$tools/bin/python" -c 'import numpy, safetensors, cmake' 2>/dev/null; then
    echo "== sd-server: installing cmake, numpy and safetensors from PyPI into $tools"
    python3 -m venv "$tools" && "$tools/bin/pip" install -q cmake numpy safetensors || return 1
  fi

  if [ ! -x "$bin" ]; then
    if ! command -v c++ >/dev/null; then
      echo "== sd-server: no C++ compiler, so no sd-server"
      return 1
    fi
    local work
    work="$(mktemp -d "${TMPDIR:-/tmp}/easel-sd-build.XXXXXX")"
    echo "== sd-server: building stable-diffusion.cpp $SD_CPP_PYPI_VERSION's sd-server (once per machine; minutes)"
    local started=$SECONDS
    "$tools/bin/pip" download -q --no-deps --no-binary stable-diffusion-cpp-python \
      "stable-diffusion-cpp-python==$SD_CPP_PYPI_VERSION" -d "$work" || { rm -rf "$work"; return 1; }
    local sdist="$work/stable_diffusion_cpp_python-$SD_CPP_PYPI_VERSION.tar.gz"
    if ! echo "$SD_CPP_SDIST_SHA256  $sdist" | sha256sum -c --quiet; then
      echo "== sd-server: the downloaded source distribution does not match its digest"
      rm -rf "$work"
      return 1
    fi
    tar -xzf "$sdist" -C "$work"
    local src="$work/stable_diffusion_cpp_python-$SD_CPP_PYPI_VERSION/vendor/stable-diffusion.cpp"
    # shellcheck disable=SC2086 # the flags are words
    if ! "$tools/bin/cmake" -S "$src" -B "$work/build" $flags >"$work/cmake.log" 2>&1 ||
      ! "$tools/bin/cmake" --build "$work/build" --target sd-server -j "$(nproc)" >"$work/build.log" 2>&1; then
      tail -30 "$work/cmake.log" "$work/build.log" 2>/dev/null
      echo "== sd-server: the build failed (logs above)"
      rm -rf "$work"
      return 1
    fi
    mkdir -p "$dir/bin"
    cp "$(find "$work/build" -name sd-server -type f -perm -u+x | head -1)" "$bin.partial"
    mv "$bin.partial" "$bin"
    rm -rf "$work"
    echo "== sd-server: built in $((SECONDS - started)) s"
  fi

  # The checkpoint is remade only when its generator changes.
  local gen_key
  gen_key="$(sha256sum "$here/sd-checkpoint.py" | cut -c1-12)"
  local model="$root/sd15-random-$gen_key.safetensors"
  if [ ! -f "$model" ]; then
    echo "== sd-server: writing a random-weights SD 1.5 checkpoint (2 GB, once per machine)"
    rm -f "$root"/sd15-random-*.safetensors
    "$tools/bin/python" "$here/sd-checkpoint.py" "$model" || return 1
  fi
  export EASEL_TEST_SD_SERVER="$bin" EASEL_TEST_SD_MODEL="$model"
}

if ! sd_server_prepare; then
  if [ "${CI:-}" = "true" ]; then
    echo "sd-server could not be prepared, and CI=true needs it" >&2
    exit 1
  fi
  echo "== sd-server unavailable: tests/sd_server.rs skips its tests"
  unset EASEL_TEST_SD_SERVER EASEL_TEST_SD_MODEL
fi
