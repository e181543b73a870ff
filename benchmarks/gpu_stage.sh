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
rm -rf "$stage" && mkdir -p "$stage/wheels"
for dataset in Planetoid/Cora TUDataset/PROTEINS TUDataset/MUTAG; do  # MUTAG: the tests'
  mkdir -p "$stage/data/$dataset" && cp -r "$data/$dataset/raw" "$stage/data/$dataset/"
done
# graphfed's dependencies missing from the device image, and what they need newer than it has
pins=$("$python" -m pip list --format=freeze 2>/dev/null | grep -i -E \
  '^(pydantic|pydantic[-_]core|annotated[-_]types|typing[-_]inspection|typing[-_]extensions|pymetis)==')
# shellcheck disable=SC2086
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$stage/wheels" $pins
ls "$stage/wheels"
du -sh "$stage"
