"""Tiny generated IMDB-style data (no real reviews), shared by the IMDB, LSTM and predict tests."""

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch

POSITIVE = ["great", "wonderful", "superb", "loved", "brilliant", "moving"]
NEGATIVE = ["awful", "boring", "terrible", "hated", "dull", "waste"]
FILLER = ["the", "film", "movie", "plot", "actors", "was", "and", "a", "story", "it", "<br />", "."]


def review(rng: random.Random, label: int) -> str:
    words = rng.choices(FILLER, k=rng.randint(3, 30)) + rng.choices(
        POSITIVE if label else NEGATIVE, k=2
    )
    rng.shuffle(words)
    return " ".join(words).capitalize()


def write_imdb(data_dir: Path, num_train: int = 64, num_test: int = 32, seed: int = 0) -> Path:
    """<data_dir>/imdb/{train,test}.parquet, sorted by label like the real local copy."""
    rng = random.Random(seed)
    folder = Path(data_dir) / "imdb"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", num_train), ("test", num_test)):
        labels = [0] * (n // 2) + [1] * (n - n // 2)
        table = pa.table(
            {"text": [review(rng, y) for y in labels], "label": pa.array(labels, pa.int64())}
        )
        pq.write_table(table, folder / f"{split}.parquet")
    return folder


def train_in_process(cfg, run_dir: Path) -> dict:
    """Run `attnexp.runner.train.run` on a composed config (compose_cfg), writing a real run dir."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from attnexp.runner.train import run

    run_dir = Path(run_dir)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
    HydraConfig.instance().set_config(cfg)
    job_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    return run(job_cfg)  # which writes .hydra/, as under Hydra


TINY_MODEL = (
    "model.embed_dim=8",
    "model.hidden_size=8",
    "data.max_seq_len=32",
    "data.batch_size=16",
    "logger=csv",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
)


def token_batch(vocab_size: int, lengths: tuple[int, ...] = (7, 4, 1)):
    """Random token ids (B, T) padded with 0 after each sequence's length, and the mask (B, T)."""
    torch.manual_seed(0)
    lengths = torch.tensor(lengths)
    mask = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]
    ids = torch.randint(2, vocab_size, mask.shape).masked_fill(~mask, 0)
    return ids, mask
