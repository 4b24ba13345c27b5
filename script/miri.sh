#!/usr/bin/env bash
# Checks the allocator's unsafe code under miri: the library's unit tests and tests/miri.rs, on
# the anonymous backend (miri models neither shared mappings nor fork, so the /dev/shm backing
# and the multi-process tests stay out). Isolation is off because thread attach reads /proc.
#
# Measured: about 15 s on the 2-core development machine, after the first build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=script/setup.sh
. script/setup.sh

if ! ensure_miri; then
  echo "miri: the nightly toolchain with miri is not available here" >&2
  exit 2
fi
MIRIFLAGS="-Zmiri-disable-isolation ${MIRIFLAGS:-}" cargo +nightly miri test -p cxlalloc --lib --test miri "$@"
