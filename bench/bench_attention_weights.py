"""Multi-head self-attention that returns its weights, timed against PyTorch's own.

    python bench/bench_attention_weights.py --threads 1

predict, the validation probes and docs/analysis read each head's (B, nh, T, T) weights, which
the fused kernel (`F.scaled_dot_product_attention`) does not give. This times one forward pass
(no gradients, as there) of the MHSA row's self-attention (width 256, 8 heads) on a batch of
padded sequences, four ways:
- `attnexp`: `MultiHeadAttention(need_weights=True)`;
- `torch`: `nn.MultiheadAttention(need_weights=True, average_attn_weights=False)` with the same
  weights (the plain PyTorch module);
- `unfused`: the same maths with the scores scaled, masked and the padded rows zeroed in separate
  passes over (B, nh, T, T), as attnexp computed them before it folded the scale and
  the mask into one `baddbmm`;
- `fused`: `MultiHeadAttention(need_weights=False)`, the kernel training uses (no weights).
All four must give the same outputs (checked first, in float32). The ways take turns within each
round (`benchkit.taking_turns`); the medians over rounds are reported.
`--device cuda --precision bf16-mixed` times them on a GPU under autocast.
"""

import argparse

import benchkit
import torch
from torch import nn

from attnexp.modules.masking import masked_softmax
from attnexp.modules.mhsa import MultiHeadAttention

WAYS = ("attnexp", "torch", "unfused", "fused")


def unfused(layer: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The weights path as it was: q k^T, then / sqrt(hd), then masked_softmax (fill, softmax,
    zero the rows without a real key), each a pass over (B, nh, T, T)."""
    B, T, E = x.shape
    q, k, v = layer.in_proj(x).split(E, dim=-1)
    q, k, v = (t.view(B, T, layer.num_heads, layer.head_dim).transpose(1, 2) for t in (q, k, v))
    weights = masked_softmax(q @ k.transpose(-2, -1) / layer.head_dim**0.5, mask[:, None, None])
    return layer.out_proj((weights @ v).transpose(1, 2).reshape(B, T, E))


def forwards(layer: MultiHeadAttention, reference: nn.MultiheadAttention) -> dict:
    """Each way's forward pass, (x, mask) -> output (B, T, E)."""
    return {
        "attnexp": lambda x, mask: layer(x, mask, need_weights=True)[0],
        "torch": lambda x, mask: reference(
            x, x, x, key_padding_mask=~mask, need_weights=True, average_attn_weights=False
        )[0],
        "unfused": lambda x, mask: unfused(layer, x, mask),
        "fused": lambda x, mask: layer(x, mask, need_weights=False)[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    benchkit.timing_args(parser, batches=3, warmup=1, rounds=5)
    benchkit.device_args(parser)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--length", type=int, default=256, help="the longest sequence")
    parser.add_argument("--width", type=int, default=256, help="features (2 x LSTM hidden)")
    parser.add_argument("--heads", type=int, default=8)
    args = parser.parse_args()
    benchkit.setup(args)
    torch.manual_seed(0)
    layer = MultiHeadAttention(args.width, args.heads).eval().to(args.device)
    reference = nn.MultiheadAttention(args.width, args.heads, batch_first=True)
    reference = reference.eval().to(args.device)
    reference.in_proj_weight.data.copy_(layer.in_proj.weight.data)
    reference.in_proj_bias.data.copy_(layer.in_proj.bias.data)
    reference.out_proj.load_state_dict(layer.out_proj.state_dict())
    lengths = torch.randint(args.length // 4, args.length + 1, (args.batch_size,))
    lengths[0] = args.length  # the batch is as long as its longest sequence
    mask = (torch.arange(args.length)[None, :] < lengths[:, None]).to(args.device)  # (B, T)
    x = torch.randn(args.batch_size, args.length, args.width, device=args.device)
    ways = forwards(layer, reference)
    with torch.no_grad():
        outputs = {way: forward(x, mask) * mask[..., None] for way, forward in ways.items()}
        for way, out in outputs.items():  # padded positions differ by design: compared masked
            if not torch.allclose(out, outputs["attnexp"], atol=1e-5):
                raise SystemExit(f"{way} gives other outputs than attnexp's MHSA")

        def seconds(way: str, _: int) -> float:
            start = benchkit.clock(args.device)
            with benchkit.autocast(args):
                ways[way](x, mask)
            return benchkit.clock(args.device) - start

        medians, seconds_rounds = benchkit.taking_turns(
            WAYS, args.rounds, args.warmup + args.batches, args.warmup, seconds
        )
    for way in WAYS:
        print(f"{way:<8} {medians[way] * 1000:9.1f} ms per forward (median of {args.rounds})")
    print(f"torch / attnexp: {medians['torch'] / medians['attnexp']:.2f}x")
    benchkit.write_result(
        args,
        {
            "batch_size": args.batch_size,
            "length": args.length,
            "width": args.width,
            "heads": args.heads,
            "device": args.device,
            "precision": args.precision,
            "rounds": args.rounds,
            "seconds_per_forward": medians,
            "seconds_per_forward_rounds": seconds_rounds,
            "torch_over_attnexp": medians["torch"] / medians["attnexp"],
        },
    )


if __name__ == "__main__":
    main()
