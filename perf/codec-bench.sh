#!/bin/sh
# codec-bench.sh - the codec figures in one go: generate the gen pairs
# (optimizer 1%, inject 3%, inject 5%), then `deltacast perf codec`, which
# measures deltacast (size, ratio to the entropy bound, encode/apply GB/s
# with 1 thread and all cores) and runs xdelta3 -e -s and zstd --patch-from
# on the same pairs in the same run, side by side.
#
#   perf/codec-bench.sh [--params N] [--dir DIR] [--runs R] [--cases LIST]
#                       [--baseline-runs R] [--baseline-timeout SEC]
#                       [--real RDIR [--train]] [--keep] [--json FILE]
#
# --cases: comma list of opt1,inj3,inj5, or none (default all; at 1e9
# params one case at a time keeps tmpfs use near 8 GB).
# --real RDIR: also measure real optimizer steps, the output directory of
# perf/train-steps.py: step0 -> step1 of RDIR/lr1e-6 and RDIR/lr1e-5 (BF16),
# and of their f16/ and f8/ subdirectories when present (pairs real-1e-6,
# real-1e-5, real-1e-6-f16, ...).  --train: when RDIR holds no such pair,
# run perf/train-steps.py --out RDIR first (/usr/bin/python3 with torch;
# a few minutes on 2 cores; TRAIN_ARGS adds options, e.g.
# TRAIN_ARGS=--dtypes=bf16,f16,f8).  RDIR is never deleted.
# Defaults: --params 1e8, --dir /dev/shm/deltacast-codec-bench (a tmpfs, so
# that disk speed does not decide the comparison), --runs 3,
# --baseline-runs 1, --baseline-timeout 600 (xdelta3 at 1e9 params takes
# minutes: a run past the timeout is killed and reported as "timeout").
# The pairs are deleted at the end unless --keep.  DELTACAST_BIN selects the
# binary (default: build/cli/deltacast).
set -eu

PARAMS=1e8
DIR=/dev/shm/deltacast-codec-bench
RUNS=3
BRUNS=1
BTIMEOUT=600
KEEP=0
JSON=
CASES=opt1,inj3,inj5
REAL=
TRAIN=0
while [ $# -gt 0 ]; do
    case "$1" in
    --params) PARAMS=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --baseline-runs) BRUNS=$2; shift 2 ;;
    --baseline-timeout) BTIMEOUT=$2; shift 2 ;;
    --real) REAL=$2; shift 2 ;;
    --train) TRAIN=1; shift ;;
    --keep) KEEP=1; shift ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "codec-bench.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    esac
done

BIN=${DELTACAST_BIN:-build/cli/deltacast}
if [ ! -x "$BIN" ]; then
    echo "codec-bench.sh: $BIN not found; build first (meson setup build && ninja -C build)" >&2
    exit 1
fi
BASE_OPT=
for tool in xdelta3 zstd; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "codec-bench.sh: $tool not installed (apt-get install xdelta3 zstd); baselines skipped" >&2
        BASE_OPT=--no-baselines
    fi
done

if [ "$TRAIN" = 1 ] && [ -z "$REAL" ]; then
    echo "codec-bench.sh: --train needs --real DIR" >&2
    exit 2
fi
# the real pairs accumulate in "$@" (the options are all shifted out by now),
# so that paths with spaces survive
set --
if [ -n "$REAL" ]; then
    if [ ! -f "$REAL/lr1e-6/step1.safetensors" ] && [ ! -f "$REAL/lr1e-5/step1.safetensors" ]; then
        if [ "$TRAIN" = 0 ]; then
            echo "codec-bench.sh: $REAL holds no lr1e-6/ or lr1e-5/ step pair (run" \
                "perf/train-steps.py --out $REAL, or add --train)" >&2
            exit 1
        fi
        echo "== perf/train-steps.py --out $REAL ${TRAIN_ARGS:-}"
        /usr/bin/python3 "$(dirname "$0")/train-steps.py" --out "$REAL" ${TRAIN_ARGS:-}
    fi
    for lr in 1e-6 1e-5; do
        for sub in "" f16 f8; do
            d="$REAL/lr$lr${sub:+/$sub}"
            if [ -f "$d/step0.safetensors" ] && [ -f "$d/step1.safetensors" ]; then
                set -- "$@" "--pair=real-$lr${sub:+-$sub}=$d/step0.safetensors,$d/step1.safetensors"
            fi
        done
    done
    [ $# -gt 0 ] || { echo "codec-bench.sh: no step0/step1 pair under $REAL" >&2; exit 1; }
fi

# space: two files of 2 bytes per param per case, plus a delta and one
# output per case while measuring
ncases=$(echo "$CASES" | tr ',' '\n' | grep -v '^none$' | grep -c . || true)
need_mb=$(awk -v p="$PARAMS" -v n="$ncases" 'BEGIN { printf "%d", p * 2 * (2 * n + 2) / 1e6 + 64 }')
mkdir -p "$DIR"
avail_mb=$(df -Pm "$DIR" | awk 'NR == 2 { print $4 }')
if [ "$avail_mb" -lt "$need_mb" ]; then
    echo "codec-bench.sh: $DIR has $avail_mb MB free, needs about $need_mb MB" >&2
    exit 1
fi

gen() { # name model rate
    case ",$CASES," in *",$1,"*) ;; *) return 0 ;; esac
    if [ ! -f "$DIR/$1/next.safetensors" ]; then
        echo "== gen $1: --params $PARAMS --model $2 --change-rate $3"
        "$BIN" gen --params "$PARAMS" --model "$2" --change-rate "$3" --seed 1 -o "$DIR/$1"
    fi
}
gen opt1 optimizer 0.01
gen inj3 inject 0.03
gen inj5 inject 0.05

echo "== deltacast perf codec (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
"$BIN" perf codec --dir "$DIR" --params "$PARAMS" --cases "$CASES" --runs "$RUNS" --baseline-runs "$BRUNS" \
    --baseline-timeout "$BTIMEOUT" $BASE_OPT ${JSON:+--json-file "$JSON"} "$@"
[ -z "$JSON" ] || echo "JSON written to $JSON"
if [ "$KEEP" = 0 ]; then
    rm -rf "$DIR"
fi
