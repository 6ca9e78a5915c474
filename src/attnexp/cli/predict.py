"""`python -m attnexp.predict ckpt_path=<ckpt, run dir or runs> text="..."`: classify or translate,
show attention.

Works for any run whose data's input kind has a predictor that reads raw inputs
(`attnexp.predictors`: tokens and pairs do; bags do not).
The run's `.hydra/config.yaml` and saved artifacts (e.g. its tokenizer) rebuild the DataModule and
the model without touching the dataset; the checkpoint's weights are loaded strictly.

Inputs: the DataModule's raw fields as `key=value` arguments (`text=...`, or `text_a=... text_b=...`),
taken verbatim (no Hydra quoting needed), or `texts_file=` with one example per line (fields
tab-separated; a blank line gets a "no prediction" row). Output: one line per example (label,
probability, notes; a translation run: the translation, its score and, with decode.n_best > 1,
the n-best), `predictions.jsonl` (with each example's tokens and attention weights, for a model
with attention), and per-example attention figures (PNG + self-contained HTML) in `out_dir`:
a new folder, never one holding an earlier prediction or inside a training run.
A translation's heatmap is target x source; its HTML page shades the source once per target token.
The exit status is 2 when no input could be classified or translated.

`ckpt_path=<a folder of runs>` (a multirun dir, say) compares them: each completed run's best
checkpoint reads the same inputs, its figures go to `<out_dir>/<run name>/` (a name's "/" as "__",
"~2" after a name that comes out as an earlier run's), which must not exist yet (with figures=false
none is made), so out_dir=<the folder of runs itself> is refused; every line of predictions.jsonl
names its `run`, and `compare.html` shows, per example, each run's label and attention one under
another.

This module is the command line: `--help` and a key predict.yaml lacks are answered in a fraction
of a second. torch and Lightning come with `attnexp.runner.predict`, imported once a prediction starts.
"""

import logging
import sys

from attnexp.cli.compose import answer_without_running, compose_command_cfg
from attnexp.cli.overrides import quote_equals_values
from attnexp.errors import ConfigError
from attnexp.runner.config import register_resolvers
from attnexp.runner.load import check_ckpt_exists

register_resolvers()

RAW_KEYS = ("text", "text_a", "text_b")


def split_args(argv: list[str], raw_keys: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """Raw text arguments (`text=...`, taken verbatim) apart from Hydra overrides of predict.yaml."""
    raw, overrides = {}, []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key in raw_keys:
            raw[key] = value
        else:
            overrides.append(arg)
    return raw, overrides


def format_result(result: dict) -> str:
    shown = " | ".join(result["input"].values())
    shown = shown if len(shown) <= 70 else shown[:67] + "..."
    if result["problem"] is not None:
        return f"-         (no prediction: {result['problem']})  {shown!r}"
    if "translation" in result:
        lines = [f"{shown!r} -> {result['translation']!r}  (score {result['score']:.4f})"]
        lines += [
            f"          {rank}. {h['translation']!r}  ({h['score']:.4f})"
            for rank, h in enumerate(result.get("n_best", []), 1)
        ]
    else:
        lines = [f"{result['label']:<9} {result['probability']:.4f}  {shown!r}"]
    lines += [f"          note: {n}" for n in result["notes"]]
    lines += [f"          attention: {f}" for f in result["files"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    answer = answer_without_running("predict", __doc__, argv)
    if answer is not None:
        return answer
    try:
        raw, overrides = split_args(argv, RAW_KEYS)
        cfg = compose_command_cfg("predict", quote_equals_values(overrides))
        check_ckpt_exists(cfg)
        from attnexp.runner.predict import predict  # torch and Lightning: not for --help or a typo

        results = predict(cfg, raw)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    run = None
    for result in results:
        if result.get("run", run) != run:  # a folder of runs: each run's lines under its name
            run = result["run"]
            print(f"run {run}:")
        print(format_result(result))
    if all(r["problem"] is not None for r in results):
        print(
            "error: no input could be classified or translated (why: 'no prediction' above)",
            file=sys.stderr,
        )
        return 2
    return 0


def cli() -> None:
    sys.exit(main())
