#!/usr/bin/env bash
# Profile ncu_kernels.py under Nsight Compute and export the report as the CSV pages
# traceparse reads. Usage (from anywhere):
#
#     bash sample_traces/capture/capture_ncu.sh OUTDIR [extra ncu_kernels.py args...]
#
# Writes into OUTDIR:
#   ncu_kernels.ncu-rep            the report itself (re-export it with any newer ncu)
#   ncu_kernels.json               ranges, op shapes, GPU/software (from ncu_kernels.py)
#   ncu_kernels.raw.csv.gz         --page raw (auto units)
#   ncu_kernels.raw_base.csv.gz    --page raw --print-units base
#   ncu_kernels.details.csv.gz     --page details
#   ncu_kernels.roofline.csv.gz    --page details --section SpeedOfLight_RooflineChart
#                                  --print-details all
#   ncu_kernels.session.csv.gz     --page session (driver, launch settings)
#   ncu_commands.txt               every command run here, exactly, and ncu --version
#
# Environment: NCU (ncu binary, default: ncu on PATH), PYTHON (default python3),
# NCU_SECTIONS (what to collect; default below), NCU_TENSOR_METRICS=0 to skip the
# tensor-op counters.
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 OUTDIR [ncu_kernels.py args...]" >&2
    exit 2
fi
OUT="$1"; shift
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
NCU="${NCU:-ncu}"
PYTHON="${PYTHON:-python3}"
# --clock-control none: run at the clocks production runs at (ncu's default locks the GPU to
# base clock, which makes durations longer and ncu's peaks base-clock peaks; FORMATS B.7).
# The roofline set plus the sections the brief names (duplicates are harmless).
NCU_SECTIONS="${NCU_SECTIONS:---set roofline --section SpeedOfLight --section SpeedOfLight_RooflineChart --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis}"

command -v "$NCU" >/dev/null 2>&1 || { echo "$0: '$NCU' not found (install Nsight Compute or set NCU=/path/to/ncu)" >&2; exit 1; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
REL_OUT="${OUT#"$REPO"/}"
LOG="$OUT/ncu_commands.txt"
REP="$OUT/ncu_kernels"
: > "$LOG"

# Commands are logged relative to the repository root: no machine paths in the sample.
note() { echo "$*" | sed -e "s#$REPO/##g" >> "$LOG"; }
run() { echo "+ $*" | sed -e "s#$REPO/##g"; note "$*"; "$@"; }

{ echo "# ncu --version"; "$NCU" --version; echo; echo "# commands (run from the repository root)"; } >> "$LOG"

# Exact tensor FLOP counters (FORMATS B.6): the aggregate sm__ops_path_tensor_src_* family
# this GPU's ncu offers, sparsity variants left out. traceparse sums them into flop_tensor.
EXTRA=()
if [ "${NCU_TENSOR_METRICS:-1}" != "0" ]; then
    TENSOR=$("$NCU" --query-metrics 2>/dev/null \
        | grep -o 'sm__ops_path_tensor_src_[a-z0-9_]*' | grep -v sparsity | sort -u \
        | sed 's/$/.sum/' | paste -sd, - || true)
    if [ -n "$TENSOR" ]; then
        EXTRA=(--metrics "$TENSOR")
    else
        echo "$0: warning: ncu --query-metrics lists no sm__ops_path_tensor_src_* counters;" \
             "tensor FLOPs will be missing" >&2
    fi
fi

cd "$REPO"
# shellcheck disable=SC2086  # NCU_SECTIONS is a list of words on purpose
if ! run "$NCU" --clock-control none $NCU_SECTIONS ${EXTRA[@]+"${EXTRA[@]}"} --nvtx \
        --profile-from-start off --target-processes all -f -o "$REP" \
        "$PYTHON" "$HERE/ncu_kernels.py" --json "$OUT/ncu_kernels.json" "$@"; then
    echo "$0: ncu failed. If it printed ERR_NVGPUCTRPERM, the user may not read GPU" \
         "performance counters: run as root or set NVreg_RestrictProfilingToAdminUsers=0." >&2
    exit 1
fi

export_page() {  # export_page NAME ARGS...: one CSV page, gzipped (deterministic header)
    local name="$1"; shift
    note "$NCU --import $REL_OUT/ncu_kernels.ncu-rep --csv $* > $REL_OUT/ncu_kernels.$name.csv"
    if ! "$NCU" --import "$REP.ncu-rep" --csv "$@" > "$OUT/ncu_kernels.$name.csv"; then
        rm -f "$OUT/ncu_kernels.$name.csv"
        return 1
    fi
    gzip -9 -n -f "$OUT/ncu_kernels.$name.csv"
    echo "wrote $REL_OUT/ncu_kernels.$name.csv.gz"
}
export_page raw --page raw || exit 1
export_page raw_base --page raw --print-units base || exit 1
export_page details --page details || exit 1
# --print-details all needs ncu 2023.2 or newer: keep going without this page on older ones.
export_page roofline --page details --section SpeedOfLight_RooflineChart --print-details all \
    || echo "$0: warning: this ncu cannot export the roofline details page" >&2
export_page session --page session \
    || echo "$0: warning: this ncu cannot export the session page" >&2
echo "ncu capture done: $REL_OUT"
