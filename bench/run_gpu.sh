#!/usr/bin/env bash
# The GPU measurements, on a machine with one CUDA GPU, from a copy of the working tree (no
# install needed: the wheels bench/gpu_wheels.sh downloaded into .whl/ fill in what its Python
# lacks, and src/ goes on PYTHONPATH):
#   OUT=folder bash bench/run_gpu.sh              # "speed": ~5 min on an H100
#   OUT=folder bash bench/run_gpu.sh all          # the parts not yet measured: <= 8 min
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
# all:   newtests, staging (2 rounds), precision (250 steps, <= 150 s), then jobs in the time
#        left (ALL_BUDGET_S, 450 s: with the setup, under 8 min on an H100).
# newtests:  the gpu tests of pinned text batches, of mixed precision with gradient clipping and of two
#            sweep jobs at once on the GPU (OUT/tests_new.log).
# staging:   IMDB through the runner's DataModule, batches pinned against pageable
#            (bench/bench_text_staging.py; OUT/text_staging.json), ~30 s.
# precision: the tuned IMDB recipe cut to 300 steps in 32-true, bf16-mixed and 16-mixed x 3
#            seeds: ms/step, test accuracy, the fastest that keeps it
#            (bench/bench_lstm_precision.py; OUT/lstm_precision.md, .json, .log), ~2 min.
# jobs:      K = 8, 4, 2 sweep jobs at once against one at a time, bags and IMDB
#            (bench/bench_parallel_jobs.py; OUT/parallel_jobs.md, .json, logs), ~4 min.
# multi30k:  the Multi30k rows of docs/results.md side by side on the GPU (nmt_multi30k,
#            nmt_multi30k_tuned and nmt_multi30k_transformer, each with a variant), training at most
#            M30K_TRAIN_S (420) each, then their tests; needs DATA=<folder holding multi30k/>.
#            OUT/multi30k.md and .csv (attnexp.report over the jobs), OUT/multi30k_runs.tgz (run
#            dirs, no checkpoints, and each job's output).
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
    local pairs=(hydra:hydra_core omegaconf:omegaconf antlr4:antlr4_python3_runtime yaml:pyyaml
        datasets:datasets dill:dill multiprocess:multiprocess xxhash:xxhash pandas:pandas
        dateutil:python_dateutil tzdata:tzdata pytest:pytest pluggy:pluggy iniconfig:iniconfig
        pytorch_lightning:pytorch_lightning lightning_utilities:lightning_utilities
        hydra_plugins.hydra_joblib_launcher:hydra_joblib_launcher joblib:joblib)
    for pair in "${pairs[@]}"; do
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

part_newtests() {
    say "gpu tests of pinned text batches, mixed precision with clipping, two sweep jobs on the GPU"
    timeout 120 $PY -m pytest -q -m gpu -p no:cacheprovider tests/data/test_pinned_batches.py \
        tests/tasks/test_fused_with_clipping.py tests/runs/test_parallel_jobs.py \
        2>&1 | tee "$OUT/tests_new.log" | tail -3
}

part_staging() {
    say "bench/bench_text_staging.py"
    timeout -k 10 120 $PY bench/bench_text_staging.py --device "$DEVICE" ${IMDB_ARGS:-} \
        ${STAGING_ARGS:-} --out "$OUT/text_staging.json" 2>&1 | tee "$OUT/text_staging.log" |
        grep -E '^round|ratio|Error'
}

part_precision() {
    say "bench/bench_lstm_precision.py"
    rm -rf /tmp/lstm-precision
    # the sweep ends 20 s before PRECISION_S (the jobs done by then count); timeout: a backstop
    local limit=${PRECISION_S:-240}
    timeout -k 10 "$limit" $PY bench/bench_lstm_precision.py --device "$DEVICE" \
        --timeout-s $((limit - 20)) ${IMDB_ARGS:-} ${PRECISION_ARGS:-} --keep /tmp/lstm-precision \
        --out "$OUT/lstm_precision.json" --table "$OUT/lstm_precision.md" 2>&1 | tail -9
    cp /tmp/lstm-precision/sweep.log "$OUT/lstm_precision.log" 2>/dev/null
}

part_jobs() {
    # sweeps start, and end, by 60 s before JOBS_S (the jobs done by then count)
    local limit=${JOBS_S:-300}
    say "bench/bench_parallel_jobs.py (${limit} s)"
    rm -rf /tmp/parallel-jobs
    timeout -k 10 "$limit" $PY bench/bench_parallel_jobs.py --device "$DEVICE" \
        --budget-s $((limit > 120 ? limit - 60 : 60)) ${JOBS_DATA_ARGS:-} ${JOBS_ARGS:-} \
        --keep /tmp/parallel-jobs --out "$OUT/parallel_jobs.json" --table "$OUT/parallel_jobs.md" \
        2>&1 | grep -E '^\| |"error"'
    mkdir -p "$OUT/parallel_jobs_logs" && cp /tmp/parallel-jobs/*.log "$OUT/parallel_jobs_logs/" \
        2>/dev/null
}

part_all() {
    # shorter than the single modes: 250 steps per precision job, at most 150 s for them
    local budget=${ALL_BUDGET_S:-450}
    part_newtests
    STAGING_ARGS=${STAGING_ARGS:---rounds 2} part_staging
    PRECISION_S=${PRECISION_S:-150} PRECISION_ARGS=${PRECISION_ARGS:---steps 230} part_precision
    JOBS_S=$((budget - SECONDS > 90 ? budget - SECONDS : 90)) part_jobs
}

part_imdb() {
    local row
    for row in chapter_mean chapter_additive chapter_dot chapter_mhsa tuned; do
        say "experiment=imdb/$row data=imdb trainer=gpu"
        $PY -m attnexp "experiment=imdb/$row" data=imdb trainer=gpu seed=0 "paths.data_dir=$DATA" \
            trainer.enable_progress_bar=false 2>&1 | grep -E "run dir|test/acc|Error|error"
    done
}

part_multi30k() {
    local train_s=${M30K_TRAIN_S:-420} root=/tmp/multi30k
    local trainer="trainer=${M30K_TRAINER:-gpu}"
    local jobs=(
        "gru experiment=translation/nmt_multi30k trainer.precision=32-true"
        "tuned experiment=translation/nmt_multi30k_tuned trainer.precision=32-true"
        "tuned_dropout05 experiment=translation/nmt_multi30k_tuned model.dropout=0.5 trainer.precision=32-true"
        "transformer experiment=translation/nmt_multi30k_transformer trainer.precision=32-true"
        "transformer_bpe experiment=translation/nmt_multi30k_transformer data.tokenizer=bpe data.vocab_size=8000 scheduler=linear_warmup scheduler.warmup_ratio=0.05 trainer.max_epochs=30"
    )
    local threads=$(( $(nproc) / ${#jobs[@]} )) job name pids=() names=()
    local max_time
    max_time=$(printf '00:%02d:%02d:%02d' $((train_s / 3600)) $((train_s / 60 % 60)) $((train_s % 60)))
    rm -rf "$root" && mkdir -p "$root"
    say "multi30k: ${#jobs[@]} jobs at once, $threads threads each, training <= ${train_s} s"
    for job in "${jobs[@]}"; do
        name=${job%% *}
        # shellcheck disable=SC2086  # the job's overrides are words
        $PY -m attnexp ${job#* } "$trainer" seed=0 "paths.data_dir=$DATA" \
            "paths.log_dir=$root/$name" "data.cache_dir=$root/cache" \
            "++trainer.max_time=$max_time" "trainer.threads=$((threads > 0 ? threads : 1))" \
            trainer.enable_progress_bar=false ${M30K_ARGS:-} >"$root/$name.log" 2>&1 &
        pids+=($!) names+=("$name")
    done
    local i status
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}"; status=$?
        say "${names[$i]}: exit $status"
        [ $status -ne 0 ] && tail -25 "$root/${names[$i]}.log"
    done
    # the project's report: one row per job (a failed one too), every metric in report.csv
    $PY -m attnexp.report "$root" >/dev/null && cp "$root/report.md" "$OUT/multi30k.md" &&
        cp "$root/report.csv" "$OUT/multi30k.csv" && sed -n '/^## Variants/,/^## Runs/p' "$OUT/multi30k.md"
    tar -czf "$OUT/multi30k_runs.tgz" -C "$root" --exclude='*.ckpt' --exclude=cache .
}

environment
[ -d "$DATA/mnist" ] && DATA_ARGS="--data-dir $DATA"
[ -d "$DATA/imdb" ] && IMDB_ARGS="--data-dir $DATA"
[ -d "$DATA/mnist" ] && [ -d "$DATA/imdb" ] && JOBS_DATA_ARGS="--data-dir $DATA"
parts=("$@")
[ $# -eq 0 ] && parts=(speed)
for part in "${parts[@]}"; do
    "part_$part"
done
say done
