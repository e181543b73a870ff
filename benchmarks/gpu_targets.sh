#!/usr/bin/env bash
# Issue 20's GPU targets in one short call, for a session lent a GPU (a few device-minutes):
# the batched and sequential rounds against a centralized epoch on the device, and beside them
# the operation counts that stood in for them without a GPU (benchmarks/round_ops.py), so the
# two can be compared. Writes everything under ${OUT:-gpu-targets}/; DEVICE=cpu tries it here.
#     GRAPHFED_DATA=../shared/datasets bash benchmarks/gpu_targets.sh
set -uo pipefail
out=${OUT:-gpu-targets}
device=${DEVICE:-cuda}
repeats=${REPEATS:-20}
cases=${CASES:-fedavg-gcn-cora-louvain10,fedavg-gin-proteins10,local-gin-proteins10,fedavg-gcn-csbm100k-100}
mkdir -p "$out"
python -c "import torch; print(torch.__version__, torch.cuda.get_device_name() \
  if torch.cuda.is_available() else 'no CUDA device')" | tee "$out/device.txt"
for engine in batched sequential; do
  python benchmarks/round_time.py --device "$device" --repeats "$repeats" --engine "$engine" \
    --cases "$cases" | tee "$out/round_time_$engine.txt"
done
python benchmarks/round_ops.py --plan accelerator --phases --cases "$cases" \
  | tee "$out/round_ops.txt"
