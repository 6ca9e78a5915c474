"""explain.md: one run's numbers as tables with their plots and a page of examples, and the
table comparing the runs of a folder (built on the report's tables and variants)."""

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnexp.runner.explain_examples import examples_section
from attnexp.runs.collect import Run, find_runs
from attnexp.runs.tables import markdown_table, mean_std

PAGE_FILE = "explain.md"
SHOWN_CHOICES = ("model", "scorer", "data", "recipe")
NAMES = {
    "gradient_x_input": "gradient x input",
    "integrated_gradients": "integrated gradients",
    "leave_one_out": "leave-one-out",
}


# The models that return no attention, by the class their config builds (`model._target_`), and
# the option that switches a model's attention off: a run of one is refused from its saved config.
NO_ATTENTION_TARGETS = ("attnexp.models.bag.BagMLP", "attnexp.models.lstm.LSTMMean")
NO_ATTENTION_OPTION = ("attention", "none")
WITH_ATTENTION = (
    "bag_attn, bag_maxpool, lstm_attn, lstm_mhsa, self_attn, transformer, seq2seq with a scorer, "
    "transformer_seq2seq"
)


def no_attention(model: str) -> str:
    """Why a run of `model` (its option, and its class) is not explained: one line."""
    return (
        f"model={model} returns no attention weights: there is nothing to explain (give "
        f"ckpt_path=<a run of a model with attention: {WITH_ATTENTION}>)"
    )


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(summary: dict) -> str:
    """median [q1, q3] of a summarised measure."""
    if summary.get("median") is None:
        return "-"
    return f"{summary['median']:.3f} [{summary['q1']:.3f}, {summary['q3']:.3f}]"


def set_markdown(name: str, summary: dict, plots: dict[str, str]) -> list[str]:
    """One test set's section: rank agreement, permutation and uniform weights, erasure, ground
    truth, with the plots (file names) under their tables."""
    lines = [f"## {name}: {set_title(summary)}", ""]
    if "unit" in summary:
        lines += [f"The unit: {summary['unit']}.", ""]
    lines += agreement_lines(summary, plots)
    lines += replacement_lines(summary, plots)
    lines += erasure_lines(summary, plots)
    lines += truth_lines(summary)
    return lines


def set_title(summary: dict) -> str:
    if "sentences" in summary:  # a translation run: pairs of (sentence, target token)
        return (
            f"{summary['sentences']} sentences, {summary['examples']} target tokens, "
            f"teacher-forced token accuracy {summary['accuracy']:.4f}"
        )
    return f"{summary['examples']} examples, accuracy {summary['accuracy']:.4f}"


def agreement_lines(summary: dict, plots: dict[str, str]) -> list[str]:
    rows = [
        [attention, NAMES.get(method, method), _spread(found["kendall_tau"]),
         _num(found["kendall_tau"]["mean"]), _num(found["top_k_overlap"]["mean"]),
         str(found["kendall_tau"]["n"])]
        for attention, methods in summary["rank_agreement"].items()
        for method, found in methods.items()
    ]  # fmt: skip
    header = ["attention", "against", "tau median [q1, q3]", "tau mean", "top-k overlap", "n"]
    lines = [
        "### Rank agreement with the attention",
        "",
        "Kendall's tau-b over the real positions (median [quartiles]) and the top-k overlap "
        "(mean); 1 = the same order.",
        "",
        markdown_table(header, rows),
        "",
    ]
    return lines + ([f"![tau]({plots['tau']})", ""] if "tau" in plots else [])


def replacement_lines(summary: dict, plots: dict[str, str]) -> list[str]:
    """Permutation and uniform weights, or why they were not measured."""
    if "permutation" not in summary:
        return [
            "Permutation and uniform weights: not measured (the model's weights come from more "
            "than one attention layer: no one place to replace them).",
            "",
        ]
    perm, uniform = summary["permutation"], summary["uniform"]
    rows = [
        ["median change of the predicted class's (token's) probability (median [q1, q3])",
         _spread(perm["median_change"])],
        ["share of shuffles that flip the decision (mean)", _num(perm["flip_share"]["mean"])],
        ["examples flipped by some shuffle", _num(perm["examples_ever_flipped"])],
        ["accuracy with uniform weights", _num(uniform["accuracy"], 4)],
        ["accuracy drop with uniform weights", _num(uniform["accuracy_drop"], 4)],
    ]  # fmt: skip
    lines = [
        "### Permutation and uniform weights",
        "",
        markdown_table(["measure", "value"], rows),
        "",
    ]
    return lines + (
        [f"![permutation]({plots['permutation']})", ""] if "permutation" in plots else []
    )


def erasure_lines(summary: dict, plots: dict[str, str]) -> list[str]:
    rows = [
        [NAMES.get(order, order), _spread(found["fraction_to_flip"]),
         _num(found["fraction_to_flip"]["mean"]), _num(found["never_flipped"])]
        for order, found in summary["erasure"].items()
    ]  # fmt: skip
    lines = [
        "### Erasure",
        "",
        "The fraction of the positions erased, most important first, when the decision first "
        "flips (lower: the order found what decides), over the examples that flip.",
        "",
        markdown_table(["order", "fraction median [q1, q3]", "mean", "never flipped"], rows),
        "",
    ]
    return lines + ([f"![erasure]({plots['erasure']})", ""] if "erasure" in plots else [])


def truth_lines(summary: dict) -> list[str]:
    if "ground_truth" not in summary:
        return []
    rows = [
        [NAMES.get(k, k) if k != "random" else "random item (chance)", _num(v)]
        for k, v in summary["ground_truth"].items()
    ]
    return [
        "### Ground truth",
        "",
        "The share of bags whose top-ranked item is a digit equal to the label (the bag's "
        "largest digit).",
        "",
        markdown_table(["ranking", "share"], rows),
        "",
    ]


def write_run_page(
    result: dict, shown: dict[str, list[dict]], predictor: Any, cfg: DictConfig, out_dir: Path
) -> Path:
    """explain.md and its plots (and examples.html for text, examples_<set>_*.png for bags)."""
    from attnexp.viz.explain import plot_erasure_curves, plot_histograms

    choices = result["choices"]
    chosen = ", ".join(f"{k}={choices[k]}" for k in SHOWN_CHOICES if choices.get(k))
    lines = [
        "# Does attention explain?",
        "",
        f"Run `{result['run_dir']}`, checkpoint `{Path(result['ckpt']).name}`, "
        f"{chosen}; data: "
        f"{result['data_source']}. Integrated gradients: {cfg.explain.ig_steps} steps; "
        f"{cfg.explain.permutations} shuffles; top-k: k={cfg.explain.top_k}. Every number "
        f"is in explain.json.",
        "",
    ]
    for name, found in result["sets"].items():
        examples, plots = found["examples"], {}
        taus = {
            NAMES[m]: examples[f"kendall_tau/attention/{m}"]
            for m in NAMES
            if f"kendall_tau/attention/{m}" in examples
        }
        plots["tau"] = plot_histograms(
            taus, out_dir / f"tau_{name}.png", "Kendall tau with the attention", (-1, 1)
        ).name
        if "permutation/median_change" in examples:
            plots["permutation"] = plot_histograms(
                {"median change": examples["permutation/median_change"]},
                out_dir / f"permutation_{name}.png",
                "median |change| of the predicted class's probability over the shuffles",
                (0, 1),
            ).name
        curves = {
            NAMES.get(order, order): found["summary"]["erasure"][order]["flipped_curve"]
            for order in found["summary"]["erasure"]
        }
        plots["erasure"] = plot_erasure_curves(curves, out_dir / f"erasure_{name}.png").name
        lines += set_markdown(name, found["summary"], plots)
        lines += examples_section(
            name, shown[name], predictor, out_dir, cfg.explain.max_examples_shown
        )
    path = out_dir / PAGE_FILE
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def comparison_rows(runs: list[Run], results: dict[str, dict], folders: dict[str, str]):
    """Per run explained: its cells of the comparison table, and the numbers the variants
    table averages."""
    header = ["run", "seed", "set", "acc", "tau att~IG", "tau att~LOO", "perm change",
              "uniform drop", "erase att", "erase grad", "erase IG", "erase random",
              "truth att", "truth grad", "truth IG", "truth chance"]  # fmt: skip
    rows, numbers = [], {}
    for run in runs:
        if run.name not in results:
            continue
        for set_name, found in results[run.name]["sets"].items():
            s = found["summary"]
            agreement = s["rank_agreement"].get("attention", {})
            erasure = s["erasure"]
            truth = s.get("ground_truth", {})

            def mean(section: dict, key: str, inner: str) -> float | None:
                return section.get(key, {}).get(inner, {}).get("mean")

            cells = {
                "acc": s["accuracy"],
                "tau att~IG": mean(agreement, "integrated_gradients", "kendall_tau"),
                "tau att~LOO": mean(agreement, "leave_one_out", "kendall_tau"),
                "perm change": s.get("permutation", {}).get("median_change", {}).get("mean"),
                "uniform drop": s.get("uniform", {}).get("accuracy_drop"),
                "erase att": mean(erasure, "attention", "fraction_to_flip"),
                "erase grad": mean(erasure, "gradient_x_input", "fraction_to_flip"),
                "erase IG": mean(erasure, "integrated_gradients", "fraction_to_flip"),
                "erase random": mean(erasure, "random", "fraction_to_flip"),
                "truth att": truth.get("attention"),
                "truth grad": truth.get("gradient_x_input"),
                "truth IG": truth.get("integrated_gradients"),
                "truth chance": truth.get("random"),
            }
            link = f"[{run.name}]({folders[run.name]}/{PAGE_FILE})"
            rows.append([link, str(run.seed), set_name, *(_num(v) for v in cells.values())])
            numbers.setdefault((run.variant_label, set_name), []).append(cells)
    return header, rows, numbers


def write_comparison(
    root: Path,
    runs: list[Run],
    results: dict[str, dict],
    left_out: dict[str, str],
    folders: dict[str, str],
    out_dir: Path,
) -> Path:
    """explain.md of a folder of runs: a row per run and test set, then per variant the mean
    +- std over its seeds; the runs left out, with why."""
    known = {run.path.resolve(): run for run in find_runs(root)}
    runs = [known.get(run.path.resolve(), run) for run in runs]  # with their variants
    header, rows, numbers = comparison_rows(runs, results, folders)
    lines = [
        "# Does attention explain? Runs compared",
        "",
        "Means over each run's sample (tau: Kendall's tau of the attention with integrated "
        "gradients and leave-one-out; perm change: per example the median change of the "
        "predicted class's probability over the shuffles of the weights; erase: fraction erased until the decision "
        "flips, in the order of attention, gradient x input, integrated gradients, at random; "
        "truth: share of bags whose top-ranked item carries the label). Each run's page has "
        "every measure.",
        "",
        markdown_table(header, rows),
        "",
        "## Per variant (mean ± std over seeds)",
        "",
    ]
    keys = header[3:]
    variant_rows = [
        [variant, set_name, str(len(cells)),
         *(mean_std([c[k] for c in cells if c[k] is not None]) or "-" for k in keys)]
        for (variant, set_name), cells in numbers.items()
    ]  # fmt: skip
    lines += [markdown_table(["variant", "set", "runs", *keys], variant_rows), ""]
    if left_out:
        lines += ["## Left out", ""] + [f"- {k}: {v}" for k, v in left_out.items()] + [""]
    path = out_dir / PAGE_FILE
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
