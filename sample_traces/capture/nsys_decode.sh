#!/usr/bin/env bash
# nsys_decode.sh DEST [DEBS] [BATCHES...]: the sweep's decoder, eager and CUDA graph, under
# Nsight Systems (NVTX step ranges, CUDA + OS runtime trace, no GPU metrics), each exported
# to DEST/decode_b<B>_<variant>.sqlite.gz with its sidecar .json. DEBS: see nsys_env.sh.
# WORKLOAD=train: the sweep's gpt2s training step instead (nsys_train.py), written as
# DEST/train_gpt2s_b<B>_<variant>.sqlite.gz.
set -uo pipefail
DEST=${1:?usage: nsys_decode.sh DEST [DEBS] [BATCHES...]}
DEBS=${2:-.dw}
shift 2 2>/dev/null || shift $#
BATCHES=${*:-1 64}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=nsys_env.sh
. "$HERE/nsys_env.sh" "$DEBS" || exit 3
mkdir -p "$DEST"
for b in $BATCHES; do
  for v in eager graph; do
    if [ "${WORKLOAD:-decode}" = train ]; then
      stem="$DEST/train_gpt2s_b${b}_${v}"; script=nsys_train.py
    else
      stem="$DEST/decode_b${b}_${v}"; script=nsys_decode.py
    fi
    timeout 240 "$NSYS" profile --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi \
      --capture-range-end=stop --sample=none --cpuctxsw=none --force-overwrite=true \
      -o "$stem" python3 "$HERE/$script" --batch "$b" --variant "$v" \
      --out "$stem.json" > "$stem.log" 2>&1 &&
    timeout 120 "$NSYS" export --type sqlite --force-overwrite true --output "$stem.sqlite" \
      "$stem.nsys-rep" >> "$stem.log" 2>&1 && gzip -n -f "$stem.sqlite"
    echo "${WORKLOAD:-decode} b$b $v: rc $?"; grep '^{' "$stem.log" || tail -3 "$stem.log"
    rm -f "$stem.nsys-rep"
  done
done
