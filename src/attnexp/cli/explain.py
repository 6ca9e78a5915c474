"""`python -m attnexp.explain ckpt_path=<run dir, .ckpt, or a folder of runs>`: does the run's
attention explain its decisions?

The run is rebuilt from its `.hydra/config.yaml` (plus `paths.data_dir=` and
`overrides=["key=value", ...]`), and a fixed sample of its own test split (`explain.n_examples`,
drawn by `explain.seed`; a bag run: its main test set and its variable-size one) is measured
against the model's attention: rank agreement (Kendall tau, top-k overlap) with gradient x
input, integrated gradients (captum) and leave-one-out; the effect of shuffling the weights and
of uniform weights (models with one attention layer); erasure in the order of each ranking until the
decision flips; on bags, whether the top-ranked digit is the label digit. Stacked self-attention
(the Transformer matcher) is read both as its last layer's [CLS] row and as attention rollout.

Output, in a new folder (default `<paths.log_dir>/explains/<time>_<id>/`): `explain.json` (every
number, per example and summarised, the settings and the run explained), `explain.md` (tables and
plots) and the examples (attention beside integrated gradients). A folder of runs: each completed
run in `<out_dir>/<run name>/`, and `explain.md` with one table comparing them (a run whose model
has no attention is left out, with a warning).

This module is the command line: `--help`, a key explain.yaml lacks, a missing path, a folder
holding no run and a run of a model without attention are answered before torch is imported.
"""

import importlib.util
import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from attnexp.cli.compose import answer_without_running, compose_command_cfg
from attnexp.cli.overrides import quote_equals_values
from attnexp.errors import ConfigError
from attnexp.runner.config import register_resolvers
from attnexp.runner.explain_page import (
    NO_ATTENTION_OPTION,
    NO_ATTENTION_TARGETS,
    no_attention,
)
from attnexp.runner.load import check_ckpt_exists, load_choices, read_run_yaml
from attnexp.runs.collect import read_records
from attnexp.runs.layout import RUN_CONFIG, run_holding

register_resolvers()


def check_holds_runs(path: Path) -> None:
    """A folder given as ckpt_path is a run, lies inside one, or holds runs below it."""
    if path.is_dir() and run_holding(path) is None and not read_records(path):
        raise ConfigError(
            f"ckpt_path={path} is not a run dir and holds no run (no metrics.json or checkpoints/ "
            f"in it or below it): give a run dir, a .ckpt file, or a folder of runs"
        )


def check_has_attention(path: Path) -> None:
    """A run of a model without attention, told from its saved config (`model._target_`, or
    `model.attention=none`); a folder of runs leaves such runs out as it meets them."""
    run_dir = run_holding(path)
    if run_dir is None or not (run_dir / RUN_CONFIG).is_file():
        return
    model = read_run_yaml(run_dir / RUN_CONFIG, OmegaConf.load).get("model") or {}
    target = model.get("_target_")
    key, off = NO_ATTENTION_OPTION
    if target in NO_ATTENTION_TARGETS or model.get(key) == off:
        chosen = load_choices(run_dir).get("model")
        detail = f", model.{key}={off}" if model.get(key) == off else ""
        raise ConfigError(no_attention(f"{chosen} ({str(target).rsplit('.', 1)[-1]}{detail})"))


def check_captum() -> None:
    """The gradients come from captum, an extra (its import needs torch: only looked up here)."""
    if importlib.util.find_spec("captum") is None:
        raise ConfigError(
            "explain needs captum for its gradient attributions: pip install 'attnexp[explain]'"
        )


def summary_lines(result: dict) -> list[str]:
    lines = [f"explained: {result['run_dir']}"]
    for name, found in result["sets"].items():
        s = found["summary"]
        tau = s["rank_agreement"].get("attention", {}).get("integrated_gradients", {})
        tau_median = tau.get("kendall_tau", {}).get("median")
        erase = s["erasure"].get("attention", {}).get("fraction_to_flip", {}).get("median")
        line = f"  {name}: {s['examples']} examples, accuracy {s['accuracy']:.4f}"
        if "sentences" in s:  # a translation run: (sentence, target token) pairs
            line = (
                f"  {name}: {s['sentences']} sentences, {s['examples']} target tokens (teacher "
                f"forced), token accuracy {s['accuracy']:.4f}"
            )
        if tau_median is not None:
            line += f", tau(attention, IG) median {tau_median:.3f}"
        if erase is not None:
            line += f", erased to flip (attention order) median {erase:.3f}"
        if "ground_truth" in s:
            line += f", top-attended digit is the label's in {s['ground_truth']['attention']:.3f}"
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    answer = answer_without_running("explain", __doc__, argv)
    if answer is not None:
        return answer
    try:
        overrides = quote_equals_values(argv)
        cfg = compose_command_cfg("explain", overrides)
        check_ckpt_exists(cfg)
        check_holds_runs(Path(str(cfg.ckpt_path)).expanduser())
        check_has_attention(Path(str(cfg.ckpt_path)).expanduser())
        check_captum()
        from attnexp.runner.explain import explain  # torch and captum: not for --help or a typo

        done = explain(cfg, overrides)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for result in done["runs"].values():
        print("\n".join(summary_lines(result)))
    for name, why in done["left_out"].items():
        print(f"left out: {name} ({why})")
    print(f"explain dir: {done['out_dir']}")
    return 0


def cli() -> None:
    sys.exit(main())
