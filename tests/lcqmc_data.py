"""Tiny generated LCQMC-style question pairs (no real LCQMC text), shared by the LCQMC tests."""

import random
from pathlib import Path

CHARS = "电脑怎么录像如何在计算机上视频手机充电为什么不能用哪里可以买到好吃的苹果天气明会下雨"


def question(rng: random.Random) -> str:
    return "".join(rng.choices(CHARS, k=rng.randint(3, 10))) + rng.choice(
        ["？", "", "吗", " iPhone6"]
    )


def write_lcqmc(
    data_dir: Path, splits: dict[str, int] | None = None, seed: int = 0, suffix: str = ".tsv"
) -> Path:
    """<data_dir>/lcqmc/<split><suffix>: text_a<TAB>text_b<TAB>label; label 1 pairs are reversed copies."""
    rng = random.Random(seed)
    folder = Path(data_dir) / "lcqmc"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (splits or {"dev": 80, "test": 40}).items():
        lines = []
        for i in range(n):
            a, label = question(rng), i % 2
            b = a[::-1] if label else question(rng)
            lines.append(f"{a}\t{b}\t{label}\n")
        (folder / f"{split}{suffix}").write_text("".join(lines), encoding="utf-8")
    return folder
