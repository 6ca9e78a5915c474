#!/usr/bin/env bash
# The GPU numbers of docs/benchmarks.md and docs/results.md, on a machine with one CUDA GPU, in
# parts that each fit in a few minutes:
#   DATA=<data_dir> OUT=folder bash bench/run_gpu.sh tests bench
#   DATA=... OUT=... bash bench/run_gpu.sh imdb
# tests: the tests marked gpu (every model's fast_dev_run under trainer=gpu, i.e. bf16-mixed; the
#        benches on CUDA; metric updates that never sync the GPU).
# bench: the IMDB, bag-MNIST and LCQMC benches (runner vs plain loop) in float32 and bf16-mixed,
#        and the MHSA weights bench (attnexp's against nn.MultiheadAttention).
# imdb:  the chapter table's four rows (seed 0) with trainer=gpu, then the tuned recipe.
# Each bench writes its JSON into OUT; each run writes its run dir under outputs/ as usual.
set -u
DATA=${DATA:-data}
OUT=${OUT:-outputs/gpu}
PY=${PYTHON:-python}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
say() { echo "=== $(date +%T) $*"; }

part_tests() {
    say "tests marked gpu"
    $PY -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tee "$OUT/tests.log" | tail -5
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
        say "MHSA weights bench, $precision"
        $PY bench/bench_attention_weights.py --device cuda --precision "$precision" \
            --warmup 3 --batches 10 --rounds 10 --out "$OUT/bench-attention-weights-$precision.json"
    done
}

part_imdb() {
    local row
    for row in mean additive dot mhsa tuned; do
        say "experiment=nndl_imdb_$row trainer=gpu"
        $PY -m attnexp "experiment=nndl_imdb_$row" trainer=gpu seed=0 "paths.data_dir=$DATA" \
            trainer.enable_progress_bar=false 2>&1 | grep -E "run dir|test/acc|Error|error"
    done
}

parts=("$@")
[ $# -eq 0 ] && parts=(tests bench)
for part in "${parts[@]}"; do
    "part_$part"
done
say done
