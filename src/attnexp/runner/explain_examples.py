"""The examples of explain.md: the first examples' attention beside their integrated gradients,
as drawn bags, as shaded tokens, or as a translation's source under each target token."""

from pathlib import Path
from typing import Any

EXAMPLES_STEM = "examples"  # examples_<set>.html (text, translation), examples_<set>_*.png (bags)


def examples_section(
    name: str, views: list[dict], predictor: Any, out_dir: Path, limit: int
) -> list[str]:
    """The first `limit` examples' attention beside their integrated gradients: drawn bags, or
    shaded tokens in a page of their own."""
    if not views:
        return []
    if "pairs" in views[0]:
        return translation_examples(name, views, predictor, out_dir, limit)
    if "items" in views[0]:
        import matplotlib.pyplot as plt

        from attnexp.viz.bags import plot_bag_attention

        batch = views[0]
        pred = batch["found"]["pred"][:limit]
        ig = batch["scores"]["integrated_gradients"][:limit].clamp(min=0)
        drawn = {
            "attention": batch["scores"]["attention"][:limit],
            "integrated gradients (share of the positive)": ig
            / ig.sum(dim=1, keepdim=True).clamp(min=1e-12),
        }
        lines = [f"### Examples ({name})", ""]
        for title, weights in drawn.items():
            file = f"{EXAMPLES_STEM}_{name}_{title.split()[0]}.png"
            figure = plot_bag_attention(
                batch["items"][:limit, :, 0],
                batch["mask"][:limit],
                weights,
                batch["labels"][:limit],
                pred,
            )
            figure.savefig(out_dir / file, dpi=90)
            plt.close(figure)
            lines += [f"{title}:", "", f"![{title}]({file})", ""]
        return lines
    from attnexp.viz.explain import save_examples_page

    examples = []
    for batch in views:
        for i in range(len(batch["labels"])):
            n = int(batch["mask"][i].sum())
            tokens = predictor.tokens(batch["input_ids"][i, :n].tolist())
            shown = {
                key: batch["scores"][key][i, :n].cpu()
                for key in ("attention", "rollout", "integrated_gradients")
                if key in batch["scores"]
            }
            caption = (
                f"label {int(batch['labels'][i])}, predicted {int(batch['found']['pred'][i])} "
                f"(p={float(batch['found']['probability'][i]):.3f})"
            )
            examples.append((caption, tokens, shown))
    examples = examples[:limit]
    file = f"{EXAMPLES_STEM}_{name}.html"
    save_examples_page(examples, f"attention beside integrated gradients ({name})", out_dir / file)
    return [f"Examples, attention beside integrated gradients: [{file}]({file})", ""]


def translation_examples(
    name: str, views: list[dict], predictor: Any, out_dir: Path, limit: int
) -> list[str]:
    """The first `limit` (sentence, target token) pairs: the source shaded by the step's
    attention and by integrated gradients, under the reference prefix and token."""
    from attnexp.data.translation_text import display_tokens
    from attnexp.viz.explain import save_examples_page

    source, target = predictor.data.tokenizers["src"], predictor.data.tokenizers["tgt"]
    examples = []
    for batch in views:
        pairs, found = batch["pairs"], batch["found"]
        for i in range(len(pairs)):
            n, step = int(pairs.src_mask[i].sum()), int(pairs.step[i])
            prefix = display_tokens(target, pairs.tgt_in[i, 1 : step + 1].tolist())
            said = display_tokens(target, [int(found["label"][i]), int(found["pred"][i])])
            caption = (
                f"sentence {int(found['sentence'][i])}, step {step}: after "
                f"'{' '.join(prefix)}' the reference '{said[0]}', greedy '{said[1]}' "
                f"(p={float(found['probability'][i]):.3f})"
            )
            shown = {
                key: batch["scores"][key][i, :n].cpu()
                for key in ("attention", "integrated_gradients")
            }
            examples.append((caption, display_tokens(source, pairs.src_ids[i, :n].tolist()), shown))
    file = f"{EXAMPLES_STEM}_{name}.html"
    title = f"the source under each target token's attention and integrated gradients ({name})"
    save_examples_page(examples[:limit], title, out_dir / file)
    return [f"Examples, attention beside integrated gradients: [{file}]({file})", ""]
