#!/usr/bin/env bash
# Builds the base image the container tests use, once per machine: no registry can be reached here,
# so it comes from the Debian archive apt already uses (debootstrap) and is imported into the engine,
# then tagged under the public names our example and test Dockerfiles start FROM (a local image of
# that name is used without a pull). Skipped when the image exists. Run it after scripts/services.sh: the
# image goes into the running engine's storage, which userns-remap makes its own
# (/var/lib/docker/<uid>.<gid>), so an engine restarted with other settings gets it again from the cache.
# Then the tests' Postgres and NATS images are built FROM it (Debian's postgresql; the wheel's
# nats-server), each tagged by a digest of its content, so they are rebuilt only when that changes.
set -euo pipefail

IMAGE=${REGATTA_TEST_IMAGE:-regatta-test-base:bookworm}
PUBLIC_NAMES=(debian:bookworm-slim debian:bookworm debian:12-slim debian:12)
CACHE=${REGATTA_TEST_IMAGE_CACHE:-/var/cache/regatta}
PACKAGES=python3,tmux,procps,ca-certificates,iproute2

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  tarball="$CACHE/bookworm-minbase.tar"
  if [ ! -s "$tarball" ]; then
    echo "test-image: debootstrap bookworm (about two minutes, once per machine)"
    mkdir -p "$CACHE"
    root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    # The mirror apt already uses (deb822 sources first, then sources.list), else Debian's own.
    mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '$2 !~ /security/ {print $2; exit}')
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
    mirror=${mirror:-http://deb.debian.org/debian}
    debootstrap --variant=minbase --include="$PACKAGES" bookworm "$root" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
      || { tail -n 20 "$CACHE/debootstrap.log"; exit 1; }
    apt-get clean -o RootDir="$root" 2>/dev/null || true
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$tarball.part" .
    mv "$tarball.part" "$tarball"
    rm -rf "$root"
    trap - EXIT
  fi
  echo "test-image: importing $IMAGE"
  docker import --change 'CMD ["/bin/bash"]' "$tarball" "$IMAGE" >/dev/null
fi
for name in "${PUBLIC_NAMES[@]}"; do
  if [ "$(docker image inspect -f '{{.Id}}' "$name" 2>/dev/null)" != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]; then
    docker tag "$IMAGE" "$name"
  fi
done
echo "test-image: the tests' Postgres and NATS images"
(cd "$(dirname "$0")/.." && .venv/bin/python -m tests.support.service_containers >/dev/null)
