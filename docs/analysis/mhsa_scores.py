"""How far a trained lstm_mhsa run's self-attention is from uniform, and why: its scores' size.

    python docs/analysis/mhsa_scores.py outputs/runs/<run> reviews.txt

For each line of the texts file (one review) it prints the spread of the pre-softmax scores
q.k / sqrt(hd) within a query's row (their standard deviation around the row's mean, over every
head and real query; softmax sees only this spread) and the largest weight as a multiple of
uniform (n x max weight, 1.0 = uniform). The same is printed with the query and key projections
redrawn at their Xavier-uniform start (`model.linear_init=xavier`, seed 0) on the same inputs, and
the size (root mean square) of the self-attention's inputs, the BiLSTM states: a score is a
product of two projected states, so it scales with the square of that size. The checkpoint is
the run's best, as predict takes it.
"""

import argparse

import torch
from omegaconf import OmegaConf

from attnexp.modules.masking import masked_softmax
from attnexp.modules.mhsa import MultiHeadAttention
from attnexp.predictors import predictor_for
from attnexp.runner.predict import load_predictor, texts_file_lines


def row_scores(
    attention: MultiHeadAttention, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """The scores (B, nh, T, T) of queries and keys projected by the first 2E rows of an in_proj
    `weight` and `bias`."""
    B, T, E = x.shape
    q, k = torch.nn.functional.linear(x, weight[: 2 * E], bias[: 2 * E]).split(E, dim=-1)
    q, k = (t.view(B, T, attention.num_heads, attention.head_dim).transpose(1, 2) for t in (q, k))
    return q @ k.transpose(-2, -1) / attention.head_dim**0.5


def summarise(scores: torch.Tensor, mask: torch.Tensor) -> list[dict]:
    """Per text: the scores' spread within a row, and n x the largest weight."""
    weights = masked_softmax(scores, mask[:, None, None, :])
    rows = []
    for b in range(len(scores)):
        n = int(mask[b].sum())
        real = scores[b, :, :n, :n]
        rows.append(
            {
                "tokens": n,
                "score_spread": float((real - real.mean(-1, keepdim=True)).std()),
                "peak_vs_uniform": float(weights[b, :, :n, :n].max() * n),
            }
        )
    return rows


@torch.no_grad()
def mhsa_scores(run: str, texts_file: str) -> dict:
    decode = {"beam_size": None, "n_best": 1}  # predict.yaml's: a classifier decodes nothing
    cfg = OmegaConf.create({"texts_file": texts_file, "overrides": [], "decode": decode})
    predictor = load_predictor(cfg, {}, texts_file_lines(cfg), run)
    attention = next(m for m in predictor.model.modules() if isinstance(m, MultiHeadAttention))
    inputs = {}
    hook = attention.register_forward_hook(lambda _m, args, _out: inputs.update(x=args[0]))
    batch = predictor_for(predictor.datamodule).encode_raw(predictor.examples)
    weights = predictor.model(**batch, return_attention=True).attention
    hook.remove()
    x, mask = inputs["x"], batch["mask"]
    E = x.shape[-1]
    trained, bias = attention.in_proj.weight, attention.in_proj.bias
    if bias is None:
        bias = torch.zeros(len(trained))
    generator = torch.Generator().manual_seed(0)
    bound = (6 / (E + E)) ** 0.5  # Xavier uniform of one E x E block (modules/init.py)
    fresh = (torch.rand(trained.shape, generator=generator) * 2 - 1) * bound
    return {
        "input_rms": float(x[mask].pow(2).mean().sqrt()),
        "query_key_weight_std": float(trained[: 2 * E].std()),
        "trained": summarise(row_scores(attention, x, trained, bias), mask),
        "xavier_start": summarise(row_scores(attention, x, fresh, torch.zeros_like(bias)), mask),
        "model_weights": weights,  # what the model itself returned: the scores' softmax
        "mask": mask,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="an lstm_mhsa run dir (or checkpoint)")
    parser.add_argument("texts_file", help="one text per line")
    args = parser.parse_args()
    found = mhsa_scores(args.run, args.texts_file)
    print(
        f"inputs' rms {found['input_rms']:.4f}; query and key weights' std "
        f"{found['query_key_weight_std']:.4f}"
    )
    for trained, fresh in zip(found["trained"], found["xavier_start"], strict=True):
        print(
            f"  {trained['tokens']:3d} tokens  score spread {trained['score_spread']:.4f} "
            f"(Xavier start {fresh['score_spread']:.4f})  peak {trained['peak_vs_uniform']:.4f}x "
            f"uniform (Xavier start {fresh['peak_vs_uniform']:.4f}x)"
        )


if __name__ == "__main__":
    main()
