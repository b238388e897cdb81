#!/usr/bin/env bash
# One command for the real GPU samples (issue 10): on a machine with an H100 or H200,
# PyTorch with CUDA and Nsight Compute, from the repository root:
#
#     bash sample_traces/capture/capture_all.sh            # -> sample_traces/h100/ or h200/
#     bash sample_traces/capture/capture_all.sh --dest sample_traces/a100   # other GPUs
#     bash sample_traces/capture/capture_all.sh --skip-ncu # PyTorch trace only
#
# Steps: check nvidia-smi, CUDA-enabled torch and ncu; print the plan; run gpt_profile.py
# (Kineto trace of a small GPT, train + decode); run capture_ncu.sh (ncu report + CSV pages
# of four kernels); write DEST/README.md from the sidecars (make_readme.py).
# Then run the tests that read the result:  python3 -m pytest -q tests/test_capture_gpu.py
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
NCU="${NCU:-ncu}"
DEST=""
SKIP_NCU=0
while [ $# -gt 0 ]; do
    case "$1" in
        --dest) DEST="$2"; shift 2 ;;
        --skip-ncu) SKIP_NCU=1; shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "$0: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "capture_all: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: this needs an NVIDIA GPU machine"
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0)" || die "nvidia-smi failed"
DRIVER="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)"
if [ -z "$DEST" ]; then
    case "$GPU" in
        *H100*) DEST="sample_traces/h100" ;;
        *H200*) DEST="sample_traces/h200" ;;
        *) die "GPU 0 is '$GPU', not an H100/H200: pass --dest sample_traces/<name> to capture anyway" ;;
    esac
fi
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || die "$PYTHON cannot use CUDA through torch (install a CUDA build of PyTorch)"
TORCH="$("$PYTHON" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')"
if [ "$SKIP_NCU" = 0 ]; then
    command -v "$NCU" >/dev/null 2>&1 \
        || die "'$NCU' (Nsight Compute) not found: install it, set NCU=/path/to/ncu, or --skip-ncu"
    NCU_VERSION="$("$NCU" --version | tail -1)"
else
    NCU_VERSION="(skipped)"
fi

cd "$REPO"
TRACE="$DEST/gpt_train_decode.json.gz"
cat <<EOF
capture_all: GPU 0 = $GPU, driver $DRIVER
             torch $TORCH; ncu $NCU_VERSION
             writing into $DEST/:
  1. $PYTHON sample_traces/capture/gpt_profile.py --device cuda --out $TRACE
     (Kineto trace of a small GPT: train steps, prefill, decode steps; + .meta.json)
  2. bash sample_traces/capture/capture_ncu.sh $DEST
     (ncu --clock-control none, roofline sections, 4 kernels; report + CSV pages, gzipped)
  3. $PYTHON sample_traces/capture/make_readme.py $DEST
EOF
[ "$SKIP_NCU" = 1 ] && echo "  (step 2 skipped: --skip-ncu)"
mkdir -p "$DEST"

echo "== 1/3 PyTorch profiler trace"
"$PYTHON" sample_traces/capture/gpt_profile.py --device cuda --out "$TRACE"
if [ "$SKIP_NCU" = 0 ]; then
    echo "== 2/3 Nsight Compute"
    NCU="$NCU" PYTHON="$PYTHON" bash sample_traces/capture/capture_ncu.sh "$DEST"
fi
echo "== 3/3 README"
"$PYTHON" sample_traces/capture/make_readme.py "$DEST"
du -sh "$DEST"/* | sed 's/^/  /'
echo "capture_all: done. Now: python3 -m pytest -q tests/test_capture_gpu.py"
