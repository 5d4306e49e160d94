#!/usr/bin/env bash
# A Debian base image made without any container registry: debootstrap (minbase) from the
# machine's own Debian mirror, imported with `podman import` as localhost/debian:bookworm-slim,
# the RUNTIME_IMAGE that `podman build --target prebuilt` takes (docs/deployment.md).
#
# The root filesystem is cached as a tarball under EASEL_IMAGE_CACHE (default
# ~/.cache/easel-images), named by a hash of what made it (suite, mirror, variant, this recipe),
# so later runs on the same machine only import it again, and a changed mirror or recipe makes a
# new one. Needs root and debootstrap; prints the image's name on its last line.
set -euo pipefail

suite="${EASEL_BASE_SUITE:-bookworm}"
image="${EASEL_BASE_IMAGE:-localhost/debian:$suite-slim}"
cache="${EASEL_IMAGE_CACHE:-$HOME/.cache/easel-images}"

# The first Debian mirror apt uses here (deb822 sources first, then the one-line format).
mirror="${EASEL_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  mirror="$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)"
fi
if [ -z "$mirror" ]; then
  mirror="$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)"
fi
mirror="${mirror:-http://deb.debian.org/debian}"

# Bump when the recipe below changes, so that old tarballs are not reused.
recipe=3
key="$(printf '%s\n' "$suite" "$mirror" minbase "$recipe" | sha256sum | cut -c1-16)"
tarball="$cache/debian-$suite-minbase-$key.tar"

if podman image exists "$image" &&
  [ "$(podman image inspect --format '{{index .Labels "easel.base.key"}}' "$image" 2>/dev/null)" = "$key" ]; then
  echo "$image"
  exit 0
fi

if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { echo "container-base: debootstrap is not installed" >&2; exit 1; }
  mkdir -p "$cache"
  root="$(mktemp -d "$cache/rootfs.XXXXXX")"
  trap 'rm -rf "$root"' EXIT
  echo "container-base: debootstrap --variant=minbase $suite from $mirror" >&2
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
    tail -20 "$cache/debootstrap.log" >&2
    exit 1
  }
  # What a slim image leaves out: package caches and lists, documentation, manuals, message
  # translations (33 MB of the 108), logs.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/* \
    "$root"/var/log/*.log "$root"/var/cache/debconf/*-old
  tar -C "$root" --numeric-owner -cf "$tarball.partial" .
  mv "$tarball.partial" "$tarball"
  rm -rf "$root"
  trap - EXIT
fi

podman import --change "LABEL easel.base.key=$key" --change 'CMD ["/bin/bash"]' \
  "$tarball" "$image" >/dev/null
echo "$image"
