# shellcheck shell=bash
# Prerequisites shared by script/run.sh, script/test.sh and .ci/run.
#
# Source this file, then call the ensure_* functions a script needs. Each one installs only what
# is missing, so on a prepared machine they cost a few `command -v` checks.

export PATH="$HOME/.cargo/bin:$PATH"

_apt_updated=""

# apt_install PKG... — installs Debian packages (as root, or through sudo when available).
apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "setup: not root and no sudo: install $* yourself" >&2
      return 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: no apt-get on this system: install $* yourself" >&2
    return 1
  fi
  if [ -z "$_apt_updated" ]; then
    $sudo apt-get update -qq || return 1
    _apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"
}

# A C compiler and linker (rustc links with cc; mimalloc's C sources build with it).
ensure_cc() {
  command -v cc >/dev/null 2>&1 || apt_install build-essential pkg-config
}

# The system libraries of the baseline allocators (docs/design.md §12.3): Boost.Interprocess
# (header-only) and PMDK libpmemobj. cxlalloc-bench's build.rs builds those baselines only when
# it finds them; without them the `boost` and `pmdk` allocators are skipped, saying why, so a
# failed install is a warning here, not an error.
ensure_baselines() {
  local missing=()
  [ -f /usr/include/boost/interprocess/managed_shared_memory.hpp ] || missing+=(libboost-dev)
  [ -f /usr/include/libpmemobj.h ] || missing+=(libpmemobj-dev)
  [ ${#missing[@]} -eq 0 ] && return 0
  apt_install "${missing[@]}" ||
    echo "setup: could not install ${missing[*]}: the boost/pmdk baselines will be skipped" >&2
}

# cargo, rustc, rustfmt and clippy of the stable toolchain.
ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1; then
    if ! command -v rustup >/dev/null 2>&1; then
      command -v curl >/dev/null 2>&1 || apt_install curl ca-certificates || return 1
      local init
      init=$(mktemp)
      echo "setup: installing rustup and the stable Rust toolchain"
      curl --proto '=https' --tlsv1.2 -sSfL \
        "https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init" -o "$init" || return 1
      chmod +x "$init"
      "$init" -y --no-modify-path --profile minimal --default-toolchain stable || return 1
      rm -f "$init"
    else
      rustup toolchain install stable --profile minimal || return 1
    fi
  fi
  if command -v rustup >/dev/null 2>&1; then
    local have
    have=$(rustup component list --installed 2>/dev/null || true)
    for c in rustfmt clippy; do
      grep -q "^$c" <<<"$have" || rustup component add "$c" || return 1
    done
  fi
}

# The nightly toolchain with miri, for script/miri.sh. Returns non-zero when it cannot be had
# (offline, no rustup): miri is an optional check.
# libclang, with which the userfaultfd crate generates its kernel bindings (feature
# mcas-standin of cxlalloc: the hardware mCAS transport's stand-in).
ensure_libclang() {
  compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null || compgen -G '/usr/lib/*/libclang*.so*' >/dev/null ||
    apt_install libclang-dev
}

ensure_miri() {
  command -v rustup >/dev/null 2>&1 || return 1
  if ! rustup +nightly component list --installed 2>/dev/null | grep -q '^miri'; then
    rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null 2>&1 || return 1
  fi
  rustup +nightly component list --installed 2>/dev/null | grep -q '^rust-src' ||
    rustup +nightly component add rust-src >/dev/null 2>&1 || return 1
}

# A Python virtual environment at .venv (repo root) with plot/requirements.txt, for plot/.
# Exports PYTHON, the venv's interpreter. pip runs only when the requirements file changed since
# the last install (a copy is kept in .venv) or an import fails, so a warm call takes well under
# a second.
ensure_venv() {
  local root venv req
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  venv=$root/.venv
  req=$root/plot/requirements.txt
  if [ ! -x "$venv/bin/python" ]; then
    command -v python3 >/dev/null 2>&1 || apt_install python3 || return 1
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      # Debian ships venv (ensurepip) separately; a failed attempt leaves a half-made directory.
      rm -rf "$venv"
      apt_install python3-venv || return 1
      python3 -m venv "$venv" || return 1
    fi
  fi
  export PYTHON=$venv/bin/python
  if ! cmp -s "$req" "$venv/requirements.installed" ||
    ! "$PYTHON" -c 'import matplotlib, numpy, pandas' >/dev/null 2>&1; then
    echo "setup: installing plot/requirements.txt into .venv"
    "$PYTHON" -m pip install -q --disable-pip-version-check -r "$req" || return 1
    cp "$req" "$venv/requirements.installed"
  fi
}
