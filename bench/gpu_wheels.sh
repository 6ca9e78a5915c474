#!/usr/bin/env bash
# Run on a machine that reaches PyPI (not on the GPU machine, which reaches nothing): downloads
# into .whl/ (git-ignored) the wheels bench/run_gpu.sh installs there when the GPU machine's
# Python lacks them. Pass `.whl` in the device run's carry (about 16 MB).
#   bash bench/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p .whl
# CPython 3.12 on x86-64 Linux, whatever this machine runs; the versions the project is tested
# with here. The joblib launcher runs sweep jobs at once (run_gpu.sh jobs).
target=(--python-version 3.12 --implementation cp --abi cp312
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform any)
$PY -m pip download -q --no-deps --only-binary=:all: "${target[@]}" -d .whl \
    hydra-core==1.3.8 omegaconf==2.3.1 PyYAML==6.0.4 \
    datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 \
    pandas==3.1.1 python-dateutil==4.0.0 tzdata==2026.6 \
    pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 \
    pytorch-lightning==2.6.6 lightning-utilities==0.15.3 \
    hydra-joblib-launcher==1.2.0 joblib==1.6.0
# antlr4-python3-runtime 4.9.3 (the one omegaconf 2.3 takes) is published as source only: build
# its pure-Python wheel here.
$PY -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
ls -la .whl
du -sh .whl
