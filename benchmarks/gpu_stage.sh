#!/usr/bin/env bash
# Stage here what benchmarks/gpu_targets.sh needs on a lent GPU machine. That machine has
# PyTorch and PyG but not all of graphfed's dependencies, and only the checkout travels to it
# (../shared does not): this copies the datasets the targets read into .gpu-stage/data and
# downloads the missing packages, at the versions this checkout's environment holds, as
# wheels for its Python (3.12, x86-64) into .gpu-stage/wheels. Then name .gpu-stage in the
# device run's carry (about 7 MB) and run `bash benchmarks/gpu_targets.sh` there.
#     GRAPHFED_DATA=../shared/datasets bash benchmarks/gpu_stage.sh
set -euo pipefail
stage=.gpu-stage
data=${GRAPHFED_DATA:-../shared/datasets}
python=${PYTHON:-.venv/bin/python}
rm -rf "$stage" && mkdir -p "$stage/wheels" "$stage/if-missing"
for dataset in Planetoid/Cora TUDataset/PROTEINS TUDataset/MUTAG; do  # MUTAG: the tests'
  mkdir -p "$stage/data/$dataset" && cp -r "$data/$dataset/raw" "$stage/data/$dataset/"
done
# wheels for the device's Python (3.12, x86-64 Linux), at the versions this environment holds
download() {  # download DIR NAME-PATTERN
  # shellcheck disable=SC2046
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d "$1" \
    $("$python" -m pip list --format=freeze 2>/dev/null | grep -i -E "^($2)==")
}
# graphfed's dependencies missing from the device image, and what they need newer than it has
download "$stage/wheels" \
  'pydantic|pydantic[-_]core|annotated[-_]types|typing[-_]inspection|typing[-_]extensions|pymetis'
# the tests' own dependency the image may lack (tests/test_batched.py imports it), staged apart:
# gpu_targets.sh installs it only where the image has none
download "$stage/if-missing" 'hypothesis|sortedcontainers'
ls "$stage/wheels" "$stage/if-missing"
du -sh "$stage"
