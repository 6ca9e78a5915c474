"""What every attnexp DataModule offers the runner besides Lightning's hooks."""

import hashlib
import logging
from collections.abc import Iterable
from typing import Any

import pytorch_lightning as pl
import torch

from attnexp.data.resumable import ResumableLoader
from attnexp.data.sources import planned

log = logging.getLogger(__name__)


def data_hash(raw: dict[str, Any]) -> str:
    """The `fingerprint` of a dataset as read: each split a tuple of parts or a dict of columns."""
    parts = []
    for name in sorted(raw):
        split = raw[name]
        columns = split.values() if isinstance(split, dict) else split
        parts.append(f"{name}:{fingerprint(*columns)}")
    return fingerprint(parts)


def fingerprint(*parts: torch.Tensor | Iterable) -> str:
    """A short content hash of one split (its texts, labels, images): whether two commands saw the
    same data. Train records one per split; evaluate compares them with its own."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        if isinstance(part, torch.Tensor):
            digest.update(part.contiguous().numpy())
        else:
            for item in part:
                digest.update(str(item).encode("utf-8", "surrogatepass") + b"\0")
        digest.update(b"\1")  # where one part ends: (ab, c) is not (a, bc)
    return digest.hexdigest()


def changed_splits(recorded: dict | None, now: dict[str, str]) -> list[str]:
    """The splits whose `fingerprint` differs from the one a record holds (none recorded:
    unknown, so not counted)."""
    recorded = recorded if isinstance(recorded, dict) else {}
    return [name for name in now if name in recorded and recorded[name] != now[name]]


class AttnDataModule(pl.LightningDataModule):
    """Base class.

    Subclasses set `input_kind` (the batch kind models must read; `attnexp.predictors` reads and
    draws predictions per kind), fill `source` during setup ("local" | "hub" | "sample") and
    provide `model_kwargs` (runtime sizes such as num_classes or vocab_size), `test_set_names`
    (extra test sets after the main one) and the probe batch whose attention is drawn.
    Those that read `<data_dir>/<data_subdir>/` set `data_subdir` and keep `data_dir` and
    `source_request` (the `data.source` setting), so `planned_source` can tell before loading.
    """

    input_kind: str = ""
    data_subdir: str | None = None
    has_hub: bool = True
    has_sample: bool = True

    def __init__(self) -> None:
        super().__init__()
        self.source: str | None = None
        # What the DataModule decided for the user (e.g. a test set dropped), said at WARNING;
        # the runner records these in the run's metrics.json.
        self.notes: list[str] = []
        # `fingerprint` of each split, filled by setup: evaluate tells data changed since training.
        self.fingerprints: dict[str, str] = {}
        # `data_hash` of the data as read, before any split is carved: the report tells runs on
        # changed data files apart by it.
        self.data_hash: str | None = None
        self._resume_at: dict | None = None  # the training loader's position in the checkpoint

    def state_dict(self) -> dict[str, Any]:
        """The training loader's position, kept in every checkpoint, so that a resumed run goes on
        from the batch it stopped at.

        Lightning keeps a `ResumableLoader`'s state itself, but hands it over only to a loader
        built after the checkpoint's training state is restored. A learning-rate schedule sizes
        itself in `configure_optimizers` from `trainer.estimated_stepping_batches`, which builds
        the training loader before that: the resumed epoch would then start again at its first
        batch. The DataModule's own state is restored before `configure_optimizers` runs, and
        `resume_position` passes it to the loader as it is built.
        """
        loader = self.trainer.train_dataloader if self.trainer is not None else None
        return {"train_loader": loader.state_dict()} if isinstance(loader, ResumableLoader) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._resume_at = state.get("train_loader")

    def resume_position(self) -> dict | None:
        """The position of the checkpoint being resumed, for the training loader (given once)."""
        position, self._resume_at = self._resume_at, None
        return position

    def note(self, message: str) -> None:
        """A decision taken for the user: said at WARNING, and recorded by the runner."""
        log.warning(message)
        self.notes.append(message)

    def planned_source(self) -> str | None:
        """The source setup will read ("local", "hub" or "sample"), decided without loading
        anything; None when unknown."""
        if self.data_subdir is None:
            return None
        return planned(
            self.source_request, self.data_dir / self.data_subdir, self.has_hub, self.has_sample
        )

    @property
    def model_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def num_classes(self) -> int:
        return int(self.model_kwargs["num_classes"])

    @property
    def test_set_names(self) -> list[str]:
        return []

    def adapt_to(self, model: torch.nn.Module) -> None:
        """Drop evaluations the model cannot run (e.g. bags larger than it was built for), with a
        note (`notes`) for each."""

    def save_artifacts(self, run_dir: str) -> None:
        """Write what evaluate/predict need besides the checkpoint (e.g. a tokenizer)."""

    def load_artifacts(self, run_dir: str) -> None:
        """Read back what `save_artifacts` wrote (called before setup by evaluate/predict)."""

    def probe_batch(self, num_examples: int = 8) -> dict[str, torch.Tensor] | None:
        """A fixed batch whose attention is drawn every validation epoch (None: no figure)."""
        return None
