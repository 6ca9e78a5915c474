#!/usr/bin/env bash
# The GPU measurements, on a machine with one CUDA GPU, from a copy of the working tree (no
# install needed: the wheels bench/gpu_wheels.sh downloaded into .whl/ fill in what its Python
# lacks, and src/ goes on PYTHONPATH):
#   OUT=folder bash bench/run_gpu.sh              # "speed": ~5 min on an H100
#   DATA=<data_dir> OUT=folder bash bench/run_gpu.sh bench imdb
# speed: the gpu-marked tests that guard the fast path first (no host sync in any model's step,
#        padded LSTM = packed on cuDNN, bags drawn on the device), then bench/bench_gpu.py (every
#        workload: runner, plain loop and floor; today's setup beside the new one; GPU busy
#        time; syncs per step), then the other gpu-marked tests in the time left.
#        Writes OUT/gpu_speed.md (the table), OUT/gpu_speed.json, OUT/tests_fast_path.log,
#        OUT/tests_gpu.log, OUT/bench_gpu.log.
# tests: every gpu-marked test (OUT/tests_all_gpu.log).
# bench: the IMDB, bag-MNIST and LCQMC runner-vs-plain benches in float32 and bf16-mixed, and
#        the MHSA weights bench (their JSON into OUT).
# imdb:  the chapter table's four rows (seed 0) with trainer=gpu, then the tuned recipe.
set -u
cd "$(dirname "$0")/.."
DATA=${DATA:-data}
OUT=${OUT:-outputs/gpu}
if [ -z "${PYTHON:-}" ]; then  # the Python that has torch
    for candidate in python3 python; do
        if $candidate -c "import torch" 2>/dev/null; then PYTHON=$candidate && break; fi
    done
fi
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-290}  # the whole "speed" part, seconds
DEVICE=${DEVICE:-cuda}     # DEVICE=cpu BENCH_ARGS="--steps 1 ..." checks the script on a CPU
BENCH_ARGS=${BENCH_ARGS:-}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
say() { echo "=== $(date +%T) +${SECONDS}s $*"; }

environment() {
    # conf/ ships as the package's attnexp.conf (pyproject's package-dir); without an install a
    # link puts it where `import attnexp.conf` looks (git-ignored).
    # Removed at exit: a package build (tests/test_packaging.py) would take it in twice.
    if [ ! -e src/attnexp/conf ]; then
        ln -s ../../conf src/attnexp/conf && trap 'rm -f src/attnexp/conf' EXIT
    fi
    local pair module wheel missing=()
    for pair in hydra:hydra_core omegaconf:omegaconf antlr4:antlr4_python3_runtime yaml:pyyaml \
        datasets:datasets dill:dill multiprocess:multiprocess xxhash:xxhash pandas:pandas \
        dateutil:python_dateutil tzdata:tzdata pytest:pytest pluggy:pluggy iniconfig:iniconfig \
        pytorch_lightning:pytorch_lightning lightning_utilities:lightning_utilities; do
        module=${pair%%:*} wheel=${pair#*:}
        if ! $PY -c "import $module" 2>/dev/null; then
            missing+=(.whl/"$wheel"-*.whl)
        fi
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing into /tmp/site: ${missing[*]}"
        # a wheel is a zip of what an install puts in site-packages: unpacked where pip is missing
        $PY -m pip install -q --no-index --no-deps --target /tmp/site "${missing[@]}" ||
            $PY -c "import sys, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sys.argv[1:]]" "${missing[@]}"
    fi
    export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
    $PY -c "import attnexp.conf, hydra, pytorch_lightning, torch; print('attnexp from', \
attnexp.conf.__file__, '| torch', torch.__version__, '| CUDA:', torch.cuda.is_available() \
and torch.cuda.get_device_name())"
}

left() { echo $((BUDGET_S - SECONDS)); }

part_speed() {
    say "gpu tests of the fast path"
    timeout 75 $PY -m pytest -q -m gpu -p no:cacheprovider -x \
        tests/test_configs.py::test_every_model_trains_on_cuda_without_host_sync \
        tests/modules/test_lstm_encoder.py tests/modules/test_rnn.py tests/data/test_bag_mnist.py \
        2>&1 | tee "$OUT/tests_fast_path.log" | tail -3
    say "bench/bench_gpu.py"
    # cases start until 70 s before the end; the last ones (the compiled bags) take ~1 min
    local budget=$(($(left) - 70))
    $PY bench/bench_gpu.py --device "$DEVICE" --rounds 2 --budget-s $((budget > 30 ? budget : 30)) \
        ${DATA_ARGS:-} $BENCH_ARGS --out "$OUT/gpu_speed.json" --table "$OUT/gpu_speed.md" \
        2>&1 | tee "$OUT/bench_gpu.log" | grep -E '^\| |"error"'
    say "the other gpu tests ($(left) s left)"
    timeout $(($(left) > 10 ? $(left) : 10)) $PY -m pytest -q -m gpu -p no:cacheprovider \
        --deselect tests/test_configs.py::test_every_model_trains_on_cuda_without_host_sync \
        tests/test_configs.py tests/tasks tests/test_bench.py \
        2>&1 | tee "$OUT/tests_gpu.log" | tail -3
}

part_tests() {
    say "every gpu-marked test"
    timeout "${TESTS_S:-240}" $PY -m pytest -q -m gpu -p no:cacheprovider 2>&1 |
        tee "$OUT/tests_all_gpu.log" | tail -5
}

part_bench() {
    local precision
    for precision in 32-true bf16-mixed; do
        local common=(--data-dir "$DATA" --device cuda --precision "$precision" --warmup 10)
        say "IMDB bench, $precision"
        $PY bench/bench_imdb.py "${common[@]}" --batches 100 --rounds 8 \
            --out "$OUT/bench-imdb-$precision.json" | grep -E "^median"
        say "bag bench, $precision"
        $PY bench/bench_bag_mnist.py "${common[@]}" --batches 100 --rounds 10 \
            --out "$OUT/bench-bag-$precision.json" | tail -1
        say "LCQMC bench, $precision"
        $PY bench/bench_lcqmc.py "${common[@]}" --batches 100 --rounds 6 \
            --out "$OUT/bench-lcqmc-$precision.json" | grep -E "^(custom|torch)"
        say "translation bench, $precision"
        $PY bench/bench_translation.py "${common[@]}" --batches 100 --rounds 6 \
            --out "$OUT/bench-translation-$precision.json" | grep -E "^(median|decoding)"
        say "MHSA weights bench, $precision"
        $PY bench/bench_attention_weights.py --device cuda --precision "$precision" \
            --warmup 3 --batches 10 --rounds 10 --out "$OUT/bench-attention-weights-$precision.json"
    done
}

part_imdb() {
    local row
    for row in chapter_mean chapter_additive chapter_dot chapter_mhsa tuned; do
        say "experiment=imdb/$row data=imdb trainer=gpu"
        $PY -m attnexp "experiment=imdb/$row" data=imdb trainer=gpu seed=0 "paths.data_dir=$DATA" \
            trainer.enable_progress_bar=false 2>&1 | grep -E "run dir|test/acc|Error|error"
    done
}

environment
[ -d "$DATA/mnist" ] && DATA_ARGS="--data-dir $DATA"
parts=("$@")
[ $# -eq 0 ] && parts=(speed)
for part in "${parts[@]}"; do
    "part_$part"
done
say done
