#!/usr/bin/env bash
# Issue 20's GPU targets in one short call, for a session lent a GPU (a few device-minutes):
# the batched and sequential rounds against a centralized epoch on the device, beside them the
# operation counts that stood in for them without a GPU (benchmarks/round_ops.py), so the two
# can be compared, and then the batched engine's tests with CUDA present (tests/test_batched.py
# compares its CUDA training with the CPU's). The batched engine's recorded rounds (CUDA graphs,
# cuda_graphs=true) come first: their tests, which say why a recording was refused if one was,
# and their round times on the node-level cases they serve. Writes everything under
# ${OUT:-gpu-targets}/.
# First stage its data and the missing packages here (benchmarks/gpu_stage.sh), then on the
# device machine, carrying .gpu-stage:
#     bash benchmarks/gpu_targets.sh
# DEVICE=cpu PYTHON=.venv/bin/python GRAPHFED_DATA=../shared/datasets tries it here.
set -uo pipefail
out=${OUT:-gpu-targets}
device=${DEVICE:-cuda}
repeats=${REPEATS:-20}
python=${PYTHON:-python3}
cases=${CASES:-fedavg-gcn-cora-louvain10,fedavg-gin-proteins10,local-gin-proteins10,fedavg-gcn-csbm100k-100,fedavg-gcn-csbm1k-10-host}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 GRAPHFED_DATA=${GRAPHFED_DATA:-$PWD/.gpu-stage/data}
if [ -d .gpu-stage/wheels ]; then  # the packages the device image lacks, staged as wheels
  staged=(.gpu-stage/wheels/*.whl)
  if ! "$python" -c "import hypothesis" 2>/dev/null; then  # the tests', where the image lacks it
    staged+=(.gpu-stage/if-missing/*.whl)
  fi
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/gpu-site "${staged[@]}" || exit 1
  export PYTHONPATH=/tmp/gpu-site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
fi
"$python" -c "import torch; print(torch.__version__, torch.cuda.get_device_name() \
  if torch.cuda.is_available() else 'no CUDA device')" | tee "$out/device.txt"
timeout "${TEST_SECONDS:-180}" "$python" -m pytest -q -p no:cacheprovider -rs -x \
  tests/test_replay.py 2>&1 | tee "$out/tests_replay.txt"
"$python" benchmarks/round_time.py --device "$device" --repeats "$repeats" --engine batched \
  --set cuda_graphs=true --cases "${GRAPH_CASES:-fedavg-gcn-cora-louvain10,fedavg-gcn-cora-louvain10-csr,fedavg-gcn-csbm1k-10-host}" \
  2>&1 | tee "$out/round_time_cuda_graphs.txt"
for engine in batched sequential; do
  "$python" benchmarks/round_time.py --device "$device" --repeats "$repeats" --engine "$engine" \
    --cases "$cases" 2>&1 | tee "$out/round_time_$engine.txt"
done
"$python" benchmarks/round_ops.py --plan accelerator --phases --cases "$cases" 2>&1 \
  | tee "$out/round_ops.txt"
timeout "${TEST_SECONDS:-180}" "$python" -m pytest -q -n 4 -p no:cacheprovider -rs \
  tests/test_batched.py tests/test_devices.py 2>&1 | tee "$out/tests.txt"
