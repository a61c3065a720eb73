#!/bin/sh
# The rdma transport on a real verbs device: run inside the soft-RoCE VM,
#   scripts/rdma-vm.sh 'tests/verbs/rdma_vm_suite.sh [BUILD_DIR]'
# (.ci/run does).  Needs DELTACAST_TEST_RDMA_ADDR / _ADDR2 (the two ends of
# the guest's veth, rxe0 and rxe1 on them) and DELTACAST_TEST_RDMA_DEV.
#  1. the transport contract over rdma: every rdma::* case of
#     tests/verbs/conformance.c (transfers, message sizes, registered
#     memory, corruption, caller CRC32Cs, cut-and-resume, authentication,
#     lost peer, orderly close, ...), then tests/verbs/test_rdma.c, what only
#     rdma has (1 GiB, GPU memory), the rdma case of
#     tests/verbs/test_perf_link_modes.c (perf link -R, --bidir, -a), and
#     `deltacast info` listing the device's port and GIDs;
#  2. `deltacast perf link --transport rdma --verify`, byte-exact, its
#     goodput beside `ib_write_bw` (perftest) on the same device, as a ratio
#     (under emulation: a functional check, not a speed benchmark);
#  2b. the ucx transport on the same device (UCX's rc_verbs), byte-exact;
#  3. a refit job: a coordinator and three receivers in one region over
#     rdma, a fourth receiver in another region over tcp, two versions,
#     every receiver byte-compared.
# Prints a line per check and "N passed, N failed" last; also written to
# BUILD_DIR/rdma-vm-count.txt.  Exit 0 only when none failed.
set -u
cd "$(dirname "$0")/../.."
dir=${1:-build}
bin="$dir/cli/deltacast"
addr=${DELTACAST_TEST_RDMA_ADDR:?not in the rdma VM (scripts/rdma-vm.sh sets it)}
addr2=${DELTACAST_TEST_RDMA_ADDR2:-$addr}
dev=${DELTACAST_TEST_RDMA_DEV:-rxe0}
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "rdma-vm: ok   $*"; }
bad() { failed=$((failed + 1)); echo "rdma-vm: FAIL $*"; }
work=$(mktemp -d /tmp/rdma-suite.XXXXXX)
export DELTACAST_SECRET=rdma-vm-suite DELTACAST_LOG=warn

# --- 1. the transport's test suites -----------------------------------------
# run_tests BINARY [CRITERION ARGS...]: one line per case; skips count as
# neither passed nor failed.
run_tests() {
  t=$1
  shift
  # (the cases a --filter leaves out are listed as "# SKIP test was skipped")
  out=$(cd "$dir/tests" && ./"$t" --tap=/dev/stdout --jobs=1 "$@" 2>"$work/$t.err" |
    grep -v "# SKIP test was skipped$")
  echo "$out" | grep -E "^(not )?ok" | sed 's/^/rdma-vm: test /'
  p=$(echo "$out" | grep -cE "^ok" || true)
  s=$(echo "$out" | grep -ciE "^ok .*# *skip" || true)
  f=$(echo "$out" | grep -cE "^not ok" || true)
  passed=$((passed + p - s))
  failed=$((failed + f))
  [ "$p" -gt 0 ] || { bad "$t $* ran no test"; tail -20 "$work/$t.err"; }
  [ "$f" = 0 ] || tail -40 "$work/$t.err"
}
run_tests verbs_conformance --filter 'rdma/*'
run_tests verbs_test_rdma
run_tests verbs_test_perf_link_modes --filter 'perf_link_modes/rdma*'
# deltacast info lists the device's port, active, with its GIDs
# (the port line, in ibv_port_state_str()'s words: "rxe0:1: active, Ethernet (RoCE), 10 Gb/s, mtu 1024;
# GID[k] ADDR, ..."; the first GID shown is the first nonzero one)
info_rdma() {
  /usr/bin/python3 -c '
import json, re, sys
dev = sys.argv[2]
rd = json.load(open(sys.argv[1]))["rdma"]
print("rdma:", json.dumps(rd, indent=1), file=sys.stderr)
pat = re.compile(re.escape(dev) + r":1: active, Ethernet \(RoCE\), [0-9]+ Gb/s, mtu [0-9]+; GID\[[0-9]+\] ")
sys.exit(0 if any(pat.match(d) for d in rd.get("devices", [])) else 1)' "$@"
}
if "$bin" info --json >"$work/info.json" 2>"$work/info.err" &&
   info_rdma "$work/info.json" "$dev" 2>"$work/info.rdma"; then
  ok "deltacast info lists $dev:1 active with its GIDs"
else
  bad "deltacast info does not list $dev:1 active with GIDs"; cat "$work/info.rdma"; tail -5 "$work/info.err"
fi

# --- 2. perf link, beside ib_write_bw ----------------------------------------
# perf_link TRANSPORT PORT BYTES SIZE LAT_ITERS: a server and a --verify
# client against it; 0 when the run was byte-exact (its JSON in
# $work/pl-TRANSPORT.json), else its logs are shown.
perf_link() {
  t=$1
  "$bin" perf link --server --transport "$t" --bind "$addr:$2" --once \
    >"$work/pl-$t-server.log" 2>&1 &
  spid=$!
  sleep 3
  "$bin" perf link --client "$addr:$2" --transport "$t" --verify --bytes "$3" --size "$4" \
    --lat-iters "$5" --json >"$work/pl-$t.json" 2>"$work/pl-$t.err" &&
    [ "$(jget "$work/pl-$t.json" verified)" = True ]
  r=$?
  wait $spid 2>/dev/null
  [ $r = 0 ] || cat "$work/pl-$t.json" "$work/pl-$t.err" "$work/pl-$t-server.log" 2>/dev/null |
    tail -20
  return $r
}
# jget FILE KEY: a top-level value of a JSON file
jget() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

if perf_link rdma 18600 256MiB 4MiB 200; then
  gbps=$(printf '%.3f' "$(jget "$work/pl-rdma.json" gbps)")
  ok "perf link --transport rdma --verify: byte-exact, $gbps Gb/s"
else
  bad "perf link --transport rdma --verify"
  gbps=""
fi
if command -v ib_write_bw >/dev/null; then
  ib_write_bw -d "$dev" -x 1 -s 4194304 -n 64 -F --report_gbits >"$work/ib-server.log" 2>&1 &
  ipid=$!
  sleep 2
  ib_write_bw -d "$dev" -x 1 -s 4194304 -n 64 -F --report_gbits "$addr" >"$work/ib.log" 2>&1
  wait $ipid 2>/dev/null
  # the result row: bytes, iterations, BW peak, BW average, MsgRate
  ib=$(awk '$1 == 4194304 && NF >= 5 {print $4}' "$work/ib.log" | tail -1)
  if [ -n "$ib" ] && [ -n "$gbps" ]; then
    ratio=$(awk -v a="$gbps" -v b="$ib" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }')
    echo "rdma-vm: goodput on $dev: deltacast $gbps Gb/s, ib_write_bw $ib Gb/s: ${ratio}x" \
         "(soft-RoCE under emulation: functional, not a benchmark)"
  else
    echo "rdma-vm: ib_write_bw gave no figure:"; tail -5 "$work/ib.log"
  fi
else
  echo "rdma-vm: ib_write_bw not installed (package perftest): no baseline"
fi

# --- 2b. the ucx transport over the same device (rc_verbs on rxe) --------------
if "$bin" --version | grep -q "ucx=yes"; then
  if perf_link ucx 18650 64MiB 1MiB 50 &&
     jget "$work/pl-ucx.json" device | grep -q "verbs/"; then
    ok "perf link --transport ucx over $(jget "$work/pl-ucx.json" device): byte-exact," \
       "$(printf '%.3f' "$(jget "$work/pl-ucx.json" gbps)") Gb/s"
  else
    bad "perf link --transport ucx over the RDMA device (byte-exact, on a verbs transport)"
  fi
fi

# --- 3. a refit: rdma inside the region, tcp to the other ----------------------
"$bin" gen --params 2e6 --change-rate 0.02 --model optimizer --threads 1 -o "$work/pair" \
  >/dev/null 2>&1
mkdir -p "$work/ver"
mv "$work/pair/base.safetensors" "$work/ver/v0.safetensors"
mv "$work/pair/next.safetensors" "$work/ver/v1.safetensors"
cat >"$work/topo.yaml" <<EOF
defaults: {lan: 10gbit, wan: 1gbit}
regions:
  - name: r0
    nodes:
      - {host: coord, addr: "$addr:18700", role: sender}
      - {host: r0n1, addr: "$addr:18701", role: receiver}
      - {host: r0n2, addr: "$addr:18702", role: receiver}
      - {host: r0n3, addr: "$addr:18703", role: receiver}
  - name: r1
    nodes:
      - {host: r1n1, addr: "$addr2:18704", role: receiver}
EOF
for i in 1 2 3 4; do cp "$work/ver/v0.safetensors" "$work/w$i.st"; done
export DELTACAST_TRANSPORT=rdma DELTACAST_TIMEOUT_MS=20000 DELTACAST_LOG=info
pids=""
for i in 1 2 3 4; do
  "$bin" node --topology "$work/topo.yaml" --rank $i --weights "$work/w$i.st" \
    --state "$work/st/$i" >"$work/node$i.log" 2>&1 &
  pids="$pids $!"
done
if "$bin" node --topology "$work/topo.yaml" --rank 0 --versions "$work/ver" \
     --state "$work/st/0" --stats "$work/stats.json" --wait-ms 120000 >"$work/node0.log" 2>&1; then
  rc=0
else
  rc=$?
fi
nodes_ok=1
for p in $pids; do wait "$p" || nodes_ok=0; done
exact=1
for i in 1 2 3 4; do cmp -s "$work/w$i.st" "$work/ver/v1.safetensors" || exact=0; done
# the edges took the transports they should: rdma inside r0, tcp to r1
nrdma=$(cat "$work"/node[123].log | grep -c "attaching to parent .* over rdma" || true)
ntcp=$(grep -c "attaching to parent .* over tcp" "$work/node4.log" || true)
if [ "$rc" = 0 ] && [ $nodes_ok = 1 ] && [ $exact = 1 ] && [ "$nrdma" -ge 3 ] && [ "$ntcp" -ge 1 ]; then
  ok "refit over rdma in region r0 ($nrdma edges) and tcp to r1: 4 receivers byte-exact at v1"
else
  bad "refit over rdma (coordinator exit $rc, receivers exit ok $nodes_ok, exact $exact, rdma edges $nrdma, tcp edges $ntcp)"
  for f in "$work"/node*.log; do echo "== $f"; tail -8 "$f"; done
fi
unset DELTACAST_TRANSPORT
export DELTACAST_LOG=warn

echo "$passed passed, $failed failed" | tee "$dir/rdma-vm-count.txt"
rm -rf "$work"
[ "$failed" = 0 ]
