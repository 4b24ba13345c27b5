#!/usr/bin/env bash
# A pod on one machine: QEMU guests (each its own kernel, so its own host in the heap) and
# processes of this machine share one heap device, a /dev/shm file that every guest sees as
# an ivshmem-plain PCI BAR (its resource2). Guests run under TCG (this machine's /dev/kvm cannot
# run a stock kernel) with `-smp 1,maxcpus=2`, without which TCG's atomics are not atomic across
# guests; they boot Debian's kernel through PVH with a busybox initramfs, and run the binaries
# built here from this machine's root, shared read-only over 9p. See README "Running on a pod".
#
#   script/pod.sh setup                 install what it needs, build the binaries and the image
#   script/pod.sh run N 'CMD'...        boot one guest per CMD (N: how many), each running its
#                                       CMD with $POD_DEV naming the device; print each guest's
#                                       output and exit status; exit non-zero if any failed
#   script/pod.sh test                  the pod tests (docs/design.md §8.6); non-zero on failure
#
# Every guest runs under `timeout`; whatever happens, the guests are killed and the pod's
# files removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=script/setup.sh
source script/setup.sh

POD=${POD_DIR:-$ROOT/target/pod}
DEV=${POD_DEV_FILE:-/dev/shm/cxlalloc-pod-$$}
DEV_SIZE=${POD_DEV_SIZE:-4G}
GUEST_TIMEOUT=${POD_GUEST_TIMEOUT:-150}
PROFILE_DIR=$ROOT/target/debug
CLI=$PROFILE_DIR/cxlalloc
# This machine is host 0 of the pod (its checker opens no-HWcc heaps in the shared device);
# guest N is host N (script_for). docs/design.md §9.2.
export CXLALLOC_HOST=0
WORKER=$PROFILE_DIR/examples/pod_worker
KV=$PROFILE_DIR/examples/pod_kv
MCASD=$PROFILE_DIR/cxlalloc-mcasd
# The modules a 9p root needs, in load order (the kernel package has no modules.dep).
MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p"

pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill -9 "$p" 2>/dev/null || true
  done
  for p in "$POD"/qemu-*.pid; do
    [ -e "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -f "$DEV"
}
trap cleanup EXIT

say() { echo "pod: $*"; }

# The kernel package's files: the newest installed Debian kernel.
kernel_version() {
  local v
  v=$(find /boot -maxdepth 1 -name 'vmlinuz-*-amd64' -printf '%f\n' | sed 's/^vmlinuz-//' | sort -V | tail -1)
  [ -n "$v" ] || { echo "pod: no /boot/vmlinuz-*-amd64 (package linux-image-amd64)" >&2; return 1; }
  echo "$v"
}

setup() {
  ensure_sysdeps build-essential qemu-system-x86 busybox-static cpio linux-image-amd64
  ensure_rust
  export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
  cargo build -q -p cxlalloc-cli --bin cxlalloc --bin cxlalloc-mcasd
  cargo build -q -p cxlalloc --example pod_worker
  cargo build -q -p cxlkv --example pod_kv
  mkdir -p "$POD"
  local kv
  kv=$(kernel_version)
  # An uncompressed vmlinux boots through PVH: no BIOS stage, no decompression (2.5 s, not 6.6).
  if [ ! -s "$POD/vmlinux-$kv" ]; then
    python3 - "/boot/vmlinuz-$kv" "$POD/vmlinux-$kv.tmp" <<'PY'
import lzma, sys
d = open(sys.argv[1], 'rb').read()
at = d.find(b'\xfd7zXZ\x00')
if at < 0:
    sys.exit("no xz payload in " + sys.argv[1])
open(sys.argv[2], 'wb').write(lzma.LZMADecompressor().decompress(d[at:]))
PY
    mv "$POD/vmlinux-$kv.tmp" "$POD/vmlinux-$kv"
  fi
  build_initramfs "$kv"
}

build_initramfs() {
  local kv=$1 img="$POD/img" m f
  rm -rf "$img"
  mkdir -p "$img"/{bin,proc,sys,dev,host,lib/modules}
  cp /bin/busybox "$img/bin/busybox"
  for m in $MODULES; do
    f=$(find "/lib/modules/$kv/kernel" -name "$m.ko" -print -quit)
    [ -n "$f" ] || { echo "pod: no module $m.ko for $kv" >&2; return 1; }
    cp "$f" "$img/lib/modules/"
  done
  cat >"$img/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
ID=$(arg pod.id)
hostname "pod-guest-$ID"
for m in MODULES_HERE; do insmod "/lib/modules/$m.ko" || echo "POD-ERROR insmod $m"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /host
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
# The root is read-only, so the guest's /tmp is a tmpfs of its own; a repository that lives
# under /tmp (a CI checkout) must stay visible: bound aside before the tmpfs hides it, then back.
ROOT=$(arg pod.root)
mkdir -p /keep
case "$ROOT" in /tmp/*) mount -o bind "/host$ROOT" /keep ;; esac
mount -t tmpfs tmp /host/tmp 2>/dev/null || true
case "$ROOT" in /tmp/*) mkdir -p "/host$ROOT" && mount -o bind /keep "/host$ROOT" ;; esac
BAR=""
for d in /sys/bus/pci/devices/*; do
  if [ "$(cat "$d/vendor")" = 0x1af4 ] && [ "$(cat "$d/device")" = 0x1110 ]; then BAR="$d/resource2"; fi
done
echo "POD-BEGIN guest $ID device $BAR"
chroot /host /usr/bin/env POD_DEV="$BAR" POD_GUEST="$ID" /bin/sh "$(arg pod.cmd)"
echo "POD-EXIT=$?"
poweroff -f
INIT
  sed -i "s/MODULES_HERE/$MODULES/" "$img/init"
  chmod +x "$img/init"
  (cd "$img" && find . | cpio -o -H newc --quiet | gzip -1) >"$POD/initrd.gz.tmp"
  # A guest that boots while the image is still being written panics: publish it whole.
  mv "$POD/initrd.gz.tmp" "$POD/initrd.gz"
}

# new_device: a fresh, zeroed device file (sparse) of DEV_SIZE.
new_device() {
  rm -f "$DEV"
  truncate -s "$DEV_SIZE" "$DEV"
}

# boot ID SCRIPT: starts guest ID running SCRIPT (a file readable over 9p); its console goes to
# $POD/guest-ID.log. Prints nothing; the guest's QEMU pid is appended to pids and guest_pid.
boot() {
  local id=$1 script=$2 kv
  kv=$(kernel_version)
  rm -f "$POD/qemu-$id.pid" "$POD/guest-$id.log"
  timeout -s KILL "$GUEST_TIMEOUT" qemu-system-x86_64 -M pc -accel tcg,thread=multi -cpu max \
    -smp 1,maxcpus=2 -m 256M -nodefaults -no-user-config -display none -no-reboot -monitor none \
    -pidfile "$POD/qemu-$id.pid" -serial "file:$POD/guest-$id.log" -kernel "$POD/vmlinux-$kv" -initrd "$POD/initrd.gz" \
    -append "console=ttyS0 panic=-1 quiet pod.id=$id pod.cmd=$script pod.root=$ROOT" \
    -object "memory-backend-file,id=hm,share=on,mem-path=$DEV,size=$DEV_SIZE" \
    -device ivshmem-plain,memdev=hm \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    </dev/null >"$POD/qemu-$id.log" 2>&1 &
  guest_pid=$!
  pids+=("$guest_pid")
}

# guest_status ID: the exit status guest ID's command reported, or 255 if it reported none
# (it hung, was killed, or never booted).
guest_status() {
  local s
  s=$(sed -n 's/.*POD-EXIT=\([0-9]*\).*/\1/p' "$POD/guest-$1.log" 2>/dev/null | tail -1)
  echo "${s:-255}"
}

# script_for ID CMD: writes CMD into a script the guest runs, and prints its path.
script_for() {
  local f="$POD/cmd-$1.sh"
  # Each guest is a host of the pod with its own host number (docs/design.md §9.2): the ID.
  printf 'set -e\nexport CXLALLOC_HOST=%s\n%s\n' "$1" "$2" >"$f"
  echo "$f"
}

show_guest() {
  echo "---- guest $1 (exit $(guest_status "$1")) ----"
  tr -d '\r' <"$POD/guest-$1.log" | sed -n '/POD-BEGIN/,$p' | grep -v '^POD-BEGIN' || true
}

# wait_guests ID...: waits for those guests' QEMUs to end.
wait_guests() {
  local id
  for id in "$@"; do
    wait "${gpid[$id]}" 2>/dev/null || true
  done
}

declare -A gpid

# start ID CMD: boots guest ID running CMD.
start() {
  boot "$1" "$(script_for "$1" "$2")"
  gpid[$1]=$guest_pid
}

# wait_for_line ID TEXT SECS: waits until guest ID's console shows TEXT.
wait_for_line() {
  local deadline=$((SECONDS + $3))
  while ! grep -q "$2" "$POD/guest-$1.log" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}

run_guests() {
  local n=$1 i rc=0
  shift
  [ "$#" -eq "$n" ] || { echo "pod: run N needs N commands" >&2; return 2; }
  new_device
  i=1
  for cmd in "$@"; do
    start "$i" "$cmd"
    i=$((i + 1))
  done
  wait_guests $(seq 1 "$n")
  for i in $(seq 1 "$n"); do
    show_guest "$i"
    [ "$(guest_status "$i")" = 0 ] || rc=1
  done
  return $rc
}

fail() {
  echo "pod: FAILED: $*" >&2
  return 1
}

# check_clean: the checker, run from this machine, finds the heap consistent with 0 live blocks.
check_clean() {
  local out
  out=$("$CLI" check --device "$DEV" --json) || fail "check exit $?: $out" || return 1
  grep -q '"live_blocks":0[,}]' <<<"$out" || { "$CLI" check --device "$DEV"; fail "live blocks left: $out"; return 1; }
  echo "checker: consistent, 0 live blocks"
}

# Test 1: blocks of every size allocated on one guest, checked and freed on another, the
# checker run from this machine clean with 0 live blocks.
test_blocks() {
  new_device
  "$CLI" format "$DEV" --slots 8 >/dev/null
  start 1 "$WORKER \$POD_DEV alloc 0"
  wait_guests 1
  show_guest 1
  [ "$(guest_status 1)" = 0 ] || fail "guest 1 could not allocate" || return 1
  start 2 "$WORKER \$POD_DEV verify-free 0"
  wait_guests 2
  show_guest 2
  [ "$(guest_status 2)" = 0 ] || fail "guest 2 found the blocks changed or could not free them" || return 1
  check_clean
}

# Test 2: the KV store (cxlkv's table, YCSB A) with a worker on each host: two guests and this
# machine update and read one shared key space at once, every read checking the bytes of a value
# another host may have written; then every key is verified and deleted from this machine, and
# the checker finds the heap consistent (the table and its tombstoned nodes stay live).
test_kv() {
  local keys=256 secs=${POD_KV_SECS:-10} out
  new_device
  "$CLI" format "$DEV" --slots 8 >/dev/null
  "$KV" "$DEV" load $keys || fail "load" || return 1
  start 1 "$KV \$POD_DEV ycsb-a 1 $keys $secs"
  start 2 "$KV \$POD_DEV ycsb-a 2 $keys $secs"
  wait_for_line 1 POD-BEGIN 120 && wait_for_line 2 POD-BEGIN 120 || { show_guest 1; show_guest 2; fail "the guests did not start"; return 1; }
  "$KV" "$DEV" ycsb-a 3 $keys "$secs" || fail "this machine's worker found a bad value" || return 1
  wait_guests 1 2
  show_guest 1
  show_guest 2
  [ "$(guest_status 1)" = 0 ] && [ "$(guest_status 2)" = 0 ] || fail "a guest's worker found a bad value" || return 1
  "$KV" "$DEV" verify $keys || fail "verify" || return 1
  "$KV" "$DEV" drain $keys || fail "drain" || return 1
  out=$("$CLI" check --device "$DEV" --json) || fail "check exit $?: $out" || return 1
  grep -q '"consistent":true' <<<"$out" || fail "checker: $out" || return 1
  echo "checker: consistent"
}

# Test 4: a guest holds every slot; this machine's attach, dead_slots, recover_dead and adopt
# never take one (a live holder on another host is not judged here).
test_foreign() {
  new_device
  "$CLI" format "$DEV" --slots 4 >/dev/null
  start 1 "$WORKER \$POD_DEV hold 4 25"
  wait_for_line 1 "holding host" 120 || { show_guest 1; fail "guest 1 did not take the slots"; return 1; }
  "$WORKER" "$DEV" foreign || fail "this machine adopted or listed dead a live guest's slot" || return 1
  wait_guests 1
  show_guest 1
  [ "$(guest_status 1)" = 0 ] || fail "guest 1 failed while holding its slots" || return 1
  check_clean
}

# Test 3: a guest's QEMU is SIGKILLed mid-workload; this machine's worker keeps running (it makes
# progress after the kill), then `recover --host` from this machine recovers the guest's slot;
# every block is then drained and the checker is clean.
test_kill() {
  new_device
  "$CLI" format "$DEV" --slots 8 >/dev/null
  start 1 "$WORKER \$POD_DEV churn 0 16 0"
  wait_for_line 1 "progress" 120 || { show_guest 1; fail "guest 1 never made progress"; return 1; }
  "$WORKER" "$DEV" churn 16 16 8 >"$POD/host-churn.log" 2>&1 &
  local churn=$! host
  pids+=("$churn")
  sleep 3
  # The guest's QEMU itself (the job is the `timeout` around it).
  kill -9 "$(cat "$POD/qemu-1.pid")"
  wait "${gpid[1]}" 2>/dev/null || true
  grep -q "POD-EXIT" "$POD/guest-1.log" && { show_guest 1; fail "guest 1 ended before it was killed"; return 1; }
  local killed_at=$SECONDS
  wait "$churn" || { cat "$POD/host-churn.log"; fail "this machine's worker failed after the kill"; return 1; }
  grep -c progress "$POD/host-churn.log" | grep -qv '^0$' || fail "no progress on this machine" || return 1
  echo "this machine's worker went on for $((SECONDS - killed_at)) s after the kill: $(tail -1 "$POD/host-churn.log")"
  host=$("$CLI" inspect --device "$DEV" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
held = [h["host"] for h in d["holders"] if not h["local"]]
# Named by index and domain (`ID:DOMAIN`), as recover --host takes it.
print(" ".join(h["ref"] for h in d["hosts"] if h["id"] in held))')
  [ -n "$host" ] || fail "the killed guest holds no slot" || return 1
  host=${host%% *}
  # From here the killed guest's holder is on another host, not declared dead: the checker must
  # not call it dead (exit 3) nor plan its recovery.
  local rc=0
  "$CLI" check --device "$DEV" >"$POD/check-before.log" || rc=$?
  [ $rc != 3 ] || { cat "$POD/check-before.log"; fail "check judged the guest's holder dead from here"; return 1; }
  "$CLI" recover --device "$DEV" --host "$host" || fail "recover --host $host" || return 1
  "$WORKER" "$DEV" drain 0 32 || fail "drain" || return 1
  check_clean
}

# Test 5: the reduced coherence models in the pod: blocks allocated on one guest, checked and
# freed on another, in a limited heap and in a no-HWcc heap whose mCAS window (carved in the
# device) this machine serves for every host with cxlalloc-mcasd.
test_models() {
  local model mcasd
  for model in limited none; do
    echo "coherence $model"
    new_device
    "$CLI" format "$DEV" --slots 8 --coherence "$model" >/dev/null
    mcasd=""
    if [ "$model" = none ]; then
      "$MCASD" --device "$DEV" >"$POD/mcasd.log" 2>&1 &
      mcasd=$!
      pids+=("$mcasd")
      sleep 1
    fi
    start 1 "$WORKER \$POD_DEV alloc 0"
    wait_guests 1
    show_guest 1
    [ "$(guest_status 1)" = 0 ] || { [ -z "$mcasd" ] || kill "$mcasd"; fail "$model: guest 1 could not allocate"; return 1; }
    start 2 "$WORKER \$POD_DEV verify-free 0"
    wait_guests 2
    show_guest 2
    [ "$(guest_status 2)" = 0 ] || { [ -z "$mcasd" ] || kill "$mcasd"; fail "$model: guest 2 found the blocks changed"; return 1; }
    check_clean || { [ -z "$mcasd" ] || kill "$mcasd"; return 1; }
    if [ -n "$mcasd" ]; then
      kill "$mcasd"
      wait "$mcasd" 2>/dev/null || true
    fi
  done
}

run_tests() {
  local t failed=0
  for t in ${POD_TESTS:-test_blocks test_kv test_foreign test_kill test_models}; do
    echo "==> pod $t"
    if "$t"; then echo "==> pod $t: ok"; else echo "==> pod $t: FAILED"; failed=$((failed + 1)); fi
    for p in "$POD"/qemu-*.pid; do
      [ -e "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null || true
    done
    for p in "${gpid[@]}"; do wait "$p" 2>/dev/null || true; done
  done
  [ $failed -eq 0 ]
}

case ${1:-test} in
  setup) setup ;;
  run)
    shift
    setup
    run_guests "$@"
    ;;
  test)
    setup
    run_tests
    ;;
  *)
    echo "usage: script/pod.sh setup | run N CMD... | test" >&2
    exit 2
    ;;
esac
