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
    $sudo apt-get -o DPkg::Lock::Timeout=300 update -qq || return 1
    _apt_updated=1
  fi
  # Another apt may hold the lock for a while (a shared machine, unattended upgrades): wait.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=300 install -y -qq "$@"
}

# ---- system dependencies ------------------------------------------------------------------------
# One table: each Debian package the scripts rely on, and the files the build really uses from it
# (a header it includes, the library it links or loads, the program it runs), as globs that must
# all match. A package counts as present only when those exact files exist, never by a look-alike:
# libclang-cpp14's libclang-cpp.so.14 is not the libclang.so that bindgen (clang-sys) loads.
# `libpython3` stands for the shared library of the system's python3 (package libpythonX.Y).
sysdep_files() {
  case $1 in
    build-essential) echo "/usr/bin/cc /usr/bin/c++ /usr/bin/make /usr/bin/nm /usr/bin/readelf" ;;
    libclang-dev) echo "/usr/lib/llvm-*/lib/libclang.so" ;;
    libboost-dev) echo "/usr/include/boost/interprocess/managed_mapped_file.hpp" ;;
    libpmemobj-dev) echo "/usr/include/libpmemobj.h /usr/lib/*/libpmemobj.so" ;;
    iverilog) echo "/usr/bin/iverilog /usr/bin/vvp" ;;
    verilator) echo "/usr/bin/verilator" ;;
    # yosys-abc comes from berkeley-abc, a dependency of the yosys package; smtio.py is the module
    # yosys-smtbmc imports.
    yosys) echo "/usr/bin/yosys /usr/bin/yosys-smtbmc /usr/bin/yosys-abc /usr/share/yosys/smtio.py" ;;
    z3) echo "/usr/bin/z3" ;;
    nextpnr-ice40) echo "/usr/bin/nextpnr-ice40" ;;
    python3) echo "/usr/bin/python3" ;;
    python3-venv) echo "/usr/lib/python3*/ensurepip/__init__.py /usr/share/python-wheels/pip-*.whl" ;;
    libpython3) echo "/usr/lib/*/$(sysdep_package libpython3).so.1.0" ;;
    nix-bin) echo "/usr/bin/nix-instantiate" ;;
    valgrind) echo "/usr/bin/valgrind /usr/libexec/valgrind/callgrind-*-linux" ;;
    redis-server) echo "/usr/bin/redis-server" ;;
    redis-tools) echo "/usr/bin/redis-benchmark /usr/bin/redis-cli" ;;
    memcached) echo "/usr/bin/memcached" ;;
    libmemcached-tools) echo "/usr/bin/memccapable /usr/bin/memcslap" ;;
    sqlite3) echo "/usr/bin/sqlite3" ;;
    libmimalloc2.0) echo "/usr/lib/*/libmimalloc.so.2" ;;
    # The pod (script/pod.sh): QEMU with SeaBIOS and the PVH boot ROM, a static busybox for the
    # guests' initramfs, cpio to pack it, and Debian's kernel with the 9p modules.
    qemu-system-x86) echo "/usr/bin/qemu-system-x86_64 /usr/share/seabios/bios-256k.bin /usr/share/qemu/pvh.bin" ;;
    busybox-static) echo "/bin/busybox" ;;
    cpio) echo "/usr/bin/cpio" ;;
    linux-image-amd64) echo "/boot/vmlinuz-*-amd64 /lib/modules/*-amd64/kernel/fs/9p/9p.ko /lib/modules/*-amd64/kernel/net/9p/9pnet_virtio.ko" ;;
    *)
      echo "setup: no files known for system dependency '$1'" >&2
      return 1
      ;;
  esac
}

# sysdep_package DEP: the Debian package that provides DEP (itself, except for libpython3).
sysdep_package() {
  if [ "$1" = libpython3 ]; then
    echo "libpython$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)"
  else
    echo "$1"
  fi
}

# sysdep_missing DEP: prints "no FILE" for the first of DEP's files that is absent and fails;
# succeeds silently when all are there.
sysdep_missing() {
  local files glob
  files=$(sysdep_files "$1") || return 0
  for glob in $files; do
    if ! compgen -G "$glob" >/dev/null; then
      echo "no $glob"
      return 0
    fi
  done
  return 1
}

# ensure_sysdeps DEP...: installs, in order, the package of each DEP whose files are missing,
# then checks the files again, so that an install which did not provide them is an error, not a
# pass. One at a time: `libpython3` names its package only once python3 is there.
ensure_sysdeps() {
  local dep why
  for dep in "$@"; do
    sysdep_missing "$dep" >/dev/null || continue
    apt_install "$(sysdep_package "$dep")" || return 1
    if why=$(sysdep_missing "$dep"); then
      echo "setup: installed $(sysdep_package "$dep"), but there is still $why" >&2
      return 1
    fi
  done
}

# A C and C++ compiler, linker and make (rustc links with cc; mimalloc's C sources, the Boost
# shim and the Verilated co-simulation build with them).
ensure_cc() {
  ensure_sysdeps build-essential
}

# The system libraries of the baseline allocators (docs/design.md §12.3): Boost.Interprocess
# (header-only) and PMDK libpmemobj. cxlalloc-bench's build.rs builds those baselines only when
# it finds them; without them the `boost` and `pmdk` allocators are skipped, saying why, so a
# failed install is a warning here, not an error.
ensure_baselines() {
  ensure_sysdeps libboost-dev libpmemobj-dev ||
    echo "setup: the boost/pmdk baselines will be skipped (see above)" >&2
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

# libclang, which bindgen loads to generate the userfaultfd crate's kernel bindings (feature
# mcas-standin of cxlalloc: the hardware mCAS transport's stand-in).
ensure_libclang() {
  ensure_sysdeps libclang-dev
}

# The nightly toolchain with miri, for script/miri.sh. Returns non-zero when it cannot be had
# (offline, no rustup): miri is an optional check.
ensure_miri() {
  command -v rustup >/dev/null 2>&1 || return 1
  if ! rustup +nightly component list --installed 2>/dev/null | grep -q '^miri'; then
    rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null 2>&1 || return 1
  fi
  rustup +nightly component list --installed 2>/dev/null | grep -q '^rust-src' ||
    rustup +nightly component add rust-src >/dev/null 2>&1 || return 1
}

# A Python virtual environment at .venv-kv (repo root) with cxlkv/tests/py/requirements.txt
# (pymemcache), for cxlkv's tests; kept apart from plot/'s .venv. Exports KV_PYTHON. pip runs only
# when the requirements changed since the last install or the import fails.
ensure_kv_venv() {
  local root venv req
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  venv=$root/.venv-kv
  req=$root/cxlkv/tests/py/requirements.txt
  if [ ! -x "$venv/bin/python" ]; then
    ensure_sysdeps python3 python3-venv || return 1
    if ! python3 -m venv "$venv"; then
      rm -rf "$venv"
      return 1
    fi
  fi
  export KV_PYTHON=$venv/bin/python
  if ! cmp -s "$req" "$venv/requirements.installed" || ! "$KV_PYTHON" -c 'import pymemcache' >/dev/null 2>&1; then
    echo "setup: installing cxlkv/tests/py/requirements.txt into .venv-kv"
    "$KV_PYTHON" -m pip install -q --disable-pip-version-check -r "$req" || return 1
    cp "$req" "$venv/requirements.installed"
  fi
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
    # Debian ships venv (ensurepip and the pip wheel it installs) apart from python3.
    ensure_sysdeps python3 python3-venv || return 1
    if ! python3 -m venv "$venv"; then
      rm -rf "$venv" # a failed attempt leaves a half-made directory
      return 1
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
