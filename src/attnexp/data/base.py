"""What every attnexp DataModule offers the runner besides Lightning's hooks."""

import difflib
import hashlib
import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from attnexp.data.batching import bucketed_loader
from attnexp.data.caches import cache_folder, cached_flat_ids
from attnexp.data.resumable import ResumableLoader
from attnexp.data.sources import planned, resolve
from attnexp.data.text import TOKENIZER_FILE, load_tokenizer, save_tokenizer
from attnexp.errors import ConfigError
from attnexp.schema import rule_for

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


def check_settings(**values: object) -> None:
    """Each `data.<key>` within the range `attnexp.schema` declares for it. The command line checks
    a composed config so before torch loads; this checks a DataModule built in code."""
    for key, value in values.items():
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        rule_for(f"data.{key}").check(f"data.{key}", value)


@dataclass(frozen=True)
class Batching:
    """How a DataModule batches: the keys `data.batch_size`, `num_workers` and `seed` (the batch
    orders, and what else the DataModule draws)."""

    batch_size: int = 128
    num_workers: int = 0
    seed: int = 0

    @classmethod
    def of(cls, owner: object, given: dict[str, Any], **defaults: Any) -> "Batching":
        """From the keys a DataModule's constructor did not name itself (`given`), over its own
        `defaults`; a key that is no setting of `owner` is refused with the nearest one."""
        names = [f.name for f in fields(cls)]
        for key in given:
            if key not in names:
                takes = [*settings_of(type(owner)), *names]
                near = difflib.get_close_matches(key, takes, n=1)
                hint = f"did you mean data.{near[0]}? " if near else ""
                raise ConfigError(
                    f"data.{key}: {type(owner).__name__} takes no setting '{key}' (it takes: "
                    f"{', '.join(takes)}); {hint}a key added with + is passed to it (drop "
                    f"+data.{key}=...)"
                )
        batching = cls(**{**defaults, **given})
        check_settings(**{k: v for k, v in vars(batching).items() if v is not None})
        return batching


def settings_of(cls: type) -> list[str]:
    """The keyword arguments the constructors of `cls` and its bases name."""
    named = [
        parameter
        for base in cls.__mro__
        if "__init__" in vars(base)
        for parameter in inspect.signature(base.__init__).parameters.values()
    ]
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return list(
        dict.fromkeys(
            p.name for p in named if p.kind in kinds and p.name not in ("self", "batching")
        )
    )


@dataclass(frozen=True)
class BucketBatching(Batching):
    """Length-bucketed batches (`attnexp.data.batching`): besides `Batching`'s keys,
    `data.eval_batch_size` (null: batch_size) and `pool_batches` (batches sorted by length
    together)."""

    eval_batch_size: int | None = None
    pool_batches: int = 50

    def size(self, train: bool) -> int:
        eval_size = self.batch_size if self.eval_batch_size is None else self.eval_batch_size
        return self.batch_size if train else eval_size


class AttnDataModule(pl.LightningDataModule):
    """Base class.

    Subclasses set `input_kind` (the batch kind models must read; `attnexp.predictors` reads and
    draws predictions per kind), fill `source` during setup ("local" | "hub" | "sample") and
    provide `model_kwargs` (runtime sizes such as num_classes or vocab_size), `test_set_names`
    (extra test sets after the main one) and the probe batch whose attention is drawn.
    Those that read `<data_dir>/<data_subdir>/` set `data_subdir` (and `dataset_name`, how
    messages name it) and read their sources with `load_raw`; `planned_source` tells which one
    before loading. `batching`: the `data.batch_size`, `num_workers` and `seed` keys.
    """

    input_kind: str = ""
    dataset_name: str = ""  # how messages and logs name it
    data_subdir: str | None = None
    has_hub: bool = True
    has_sample: bool = True

    def __init__(self, data_dir: str = ".", source: str = "auto", batching: Batching = Batching()):
        super().__init__()
        self.data_dir, self.source_request, self.batching = Path(data_dir), source, batching
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
    def seed(self) -> int:
        return self.batching.seed

    @property
    def batch_size(self) -> int:
        return self.batching.batch_size

    @property
    def num_workers(self) -> int:
        return self.batching.num_workers

    # --- sources: `load_raw` reads the one `data.source` picks ----------------------------------
    def load_raw(self) -> Any:
        """The dataset as read from `<data_dir>/<data_subdir>/`, the hub or the embedded sample
        (`attnexp.data.sources.resolve`); sets `source`."""
        raw, self.source = resolve(
            self.dataset_name,
            self.source_request,
            self.data_dir / self.data_subdir,
            self.load_local,
            self.load_hub if self.has_hub else None,
            self.load_sample if self.has_sample else None,
        )
        return raw

    def load_local(self, folder: Path) -> Any:
        raise NotImplementedError

    def load_hub(self) -> Any:
        raise NotImplementedError

    def load_sample(self) -> Any:
        raise NotImplementedError

    @property
    def model_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def num_classes(self) -> int:
        return int(self.model_kwargs["num_classes"])

    @property
    def test_set_names(self) -> list[str]:
        return []

    def pins_memory(self) -> bool:
        """Whether the loaders put their batches in page-locked memory: when the trainer trains
        on CUDA. Lightning copies a batch to the GPU with `non_blocking=True`, which only pinned
        memory makes asynchronous (from pageable memory the host waits for the copy): the copy is
        then queued on the stream and the host goes on. On the CPU (and with no trainer) nothing
        changes."""
        strategy = getattr(self.trainer, "strategy", None)  # none: no trainer (or a stand-in)
        return strategy is not None and strategy.root_device.type == "cuda"

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


class BucketedDataModule(AttnDataModule):
    """The skeleton of the token DataModules: `datasets` (stage -> a dataset with `lengths`, one
    per example, and `collate`) in length-bucketed loaders, the token-id cache under
    `<cache_dir>/<cache_subdir>/` and the run's `tokenizer.json`. A subclass fills `datasets`
    in setup and says which tokenizer is the run's (`run_tokenizer`, `use_tokenizer`)."""

    cache_subdir: str | None = None  # None: data_subdir

    def __init__(
        self, data_dir: str, source: str, cache_dir: str | None, batching: BucketBatching
    ) -> None:
        super().__init__(data_dir, source, batching)
        self.cache_folder = cache_folder(cache_dir, self.cache_subdir or self.data_subdir)
        self.datasets: dict[str, torch.utils.data.Dataset] = {}

    def loader(self, stage: str) -> DataLoader:
        dataset, train, batching = self.datasets[stage], stage == "train", self.batching
        return bucketed_loader(
            dataset,
            torch.as_tensor(dataset.lengths).clamp(min=1),  # an empty text sorts with 1-token ones
            batching.size(train),
            train=train,
            seed=batching.seed,
            collate_fn=dataset.collate,
            num_workers=batching.num_workers,
            pool_batches=batching.pool_batches,
            resume_at=self.resume_position() if train else None,
            pin_memory=self.pins_memory(),
        )

    def train_dataloader(self) -> DataLoader:
        return self.loader("train")

    def val_dataloader(self) -> DataLoader:
        return self.loader("val")

    def test_dataloader(self) -> DataLoader:
        return self.loader("test")

    def cached_ids(
        self, name: str, build: Callable[[], dict[str, torch.Tensor]], rows: int, what: str
    ) -> dict[str, torch.Tensor]:
        """`build()`'s token ids of `rows` texts, laid end to end (`attnexp.data.caches`), cached
        as `<cache folder>/<name>.pt`: `name` must hash everything that changes them."""
        return cached_flat_ids(self.cache_folder / f"{name}.pt", build, rows, what)

    def run_tokenizer(self) -> Tokenizer:
        """The tokenizer the run's token ids mean (saved in the run dir)."""
        raise NotImplementedError

    def use_tokenizer(self, tokenizer: Tokenizer) -> None:
        """Read text with a run's saved tokenizer from now on."""
        raise NotImplementedError

    def save_artifacts(self, run_dir: str) -> None:
        """The run's `tokenizer.json`, so evaluate/predict read text exactly as training did."""
        save_tokenizer(self.run_tokenizer(), run_dir)

    def load_artifacts(self, run_dir: str) -> None:
        path = Path(run_dir) / TOKENIZER_FILE
        if not path.is_file():
            raise ConfigError(
                f"{run_dir}: no {TOKENIZER_FILE} (the run did not finish its setup; retrain it)"
            )
        self.tokenizer_path = str(path)
        self.use_tokenizer(load_tokenizer(path))
