#!/usr/bin/env bash
# nsys_scenarios.sh DEST [DEBS]: the known-cause scenarios under Nsight Systems on a GPU
# machine whose nsys cannot import its own .qdstrm because libdw.so.1 is missing.
#
# DEBS holds Debian's libdw1 and the libraries it needs (libelf1, libzstd1, liblzma5,
# libbz2-1.0), fetched elsewhere with `apt-get download`; they are unpacked into a private
# folder and put on LD_LIBRARY_PATH, nothing is installed. The script first proves that
# nsys can profile and export a two-kernel program (with GPU metrics, then without), then
# runs `scenarios.py --nsys NSYS --ncu off` with the flags that worked; every scenario also
# writes its torch.profiler trace, as scenarios.py always does.
set -uo pipefail
DEST=${1:?usage: nsys_scenarios.sh DEST [DEBS]}
DEBS=${2:-.dw}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=nsys_env.sh
. "$HERE/nsys_env.sh" "$DEBS" || exit 3
for imp in $(find "$(dirname "$(dirname "$NSYS")")" -name 'QdstrmImporter*' -type f 2>/dev/null); do
  echo "importer $imp, missing libraries:"; ldd "$imp" | grep 'not found' || echo "  none"
done
mkdir -p "$DEST"
SMOKE=$(mktemp -d)
cat > "$SMOKE/two.py" <<'EOF'
import torch
torch.cuda.cudart().cudaProfilerStart()
x = torch.ones(1 << 20, device="cuda")
for _ in range(2):
    x.add_(1)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
EOF
smoke() {  # smoke NAME FLAGS...: profile and export the two-kernel program
  local name=$1; shift
  timeout 150 "$NSYS" profile "$@" --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi --capture-range-end=stop \
    --force-overwrite=true -o "$SMOKE/$name" python3 "$SMOKE/two.py" > "$SMOKE/$name.log" 2>&1 &&
  timeout 120 "$NSYS" export --type sqlite --force-overwrite true \
    --output "$SMOKE/$name.sqlite" "$SMOKE/$name.nsys-rep" >> "$SMOKE/$name.log" 2>&1
  local rc=$?
  echo "smoke $name: rc $rc"; tail -5 "$SMOKE/$name.log"
  return $rc
}
export SCENARIOS_NSYS_GPU_METRICS=on
if ! smoke metrics --gpu-metrics-devices=all --gpu-metrics-frequency=2000; then
  smoke plain || { cp "$SMOKE"/*.log "$DEST"/ 2>/dev/null; exit 4; }
  export SCENARIOS_NSYS_GPU_METRICS=off
fi
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); \
print('smoke kernels:', c.execute('select count(*) from CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0])" \
  "$SMOKE"/$([ "$SCENARIOS_NSYS_GPU_METRICS" = on ] && echo metrics || echo plain).sqlite
# shellcheck disable=SC2086  # SCENARIO_ARGS: extra scenarios.py arguments, word-split
python3 "$HERE/scenarios.py" --device cuda --out "$DEST" --nsys "$NSYS" --ncu off ${SCENARIO_ARGS:-}
