#!/usr/bin/env bash
# Make a local Debian 12 base image with Python 3.11, for hosts that cannot pull from a registry
# (CI, air-gapped clusters). Needs root, debootstrap and a Docker engine.
#
#   images/base/make-local-base.sh [IMAGE]      (default: rosetta-base:bookworm)
#   python -m orchestrator build --base-image rosetta-base:bookworm ...
#
# The Debian mirror is read from this machine's apt sources (or $DEBIAN_MIRROR), never written here.
set -euo pipefail
image="${1:-rosetta-base:bookworm}"
suite="${DEBIAN_SUITE:-bookworm}"

mirror="${DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  # deb822 sources first (URIs: ...), then one-line sources (deb URL suite ...)
  mirror=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n 1 || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}' | grep -v security | head -n 1 || true)
fi
if [ -z "$mirror" ]; then
  echo "error: no Debian mirror found in /etc/apt/sources*; set DEBIAN_MIRROR=<url>" >&2
  exit 2
fi
command -v debootstrap >/dev/null || { echo "error: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 2; }

rootfs=$(mktemp -d /tmp/rosetta-base.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "debootstrap $suite from $mirror -> $image"
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
  "$suite" "$rootfs" "$mirror" >/tmp/rosetta-base-debootstrap.log 2>&1 \
  || { echo "error: debootstrap failed; see /tmp/rosetta-base-debootstrap.log" >&2; exit 1; }
# Keep the image small: no apt lists, caches or docs.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
tar -C "$rootfs" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "built $image"
