"""A training DataLoader that Lightning can resume in the middle of an epoch."""

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from attnexp.data.seeds import loader_generator


class ResumableLoader(DataLoader):
    """Lightning keeps `state_dict()` in every checkpoint and gives it back to `load_state_dict`
    when a run resumes. The state is the epoch and how many of its batches this loader had handed
    out; the resumed epoch draws its batches in the same order (from seed and epoch) and skips that
    many, so no example is trained on twice or left out. The skipped batches are not loaded: the
    index sampler is moved on, not the data.

    Without this, Lightning restarts the interrupted epoch at its first batch (it warns "your
    dataloader is not resumable"), and `last.ckpt` is written at every validation, which
    `trainer.val_check_interval` puts mid-epoch.

    The epoch is that of the sampler Lightning moves on (`set_epoch`); a loader whose sampler has
    none (the same order every epoch) skips only when the checkpoint was written before the last
    batch.

    Lightning hands the state over only to a loader it builds after the restore; `resume_at` gives
    it at construction, for a loader built before (see `AttnDataModule.state_dict`). A keyword
    argument survives the copy of the loader Lightning makes under DDP to swap its sampler.

    Each epoch draws its workers' base seed from a generator seeded by (`seed`, epoch), never from
    torch's global one: a resumed run restores the global random state at its first training batch
    (tasks/random_state.py), after this loader started its epoch.
    """

    def __init__(
        self,
        *args: Any,
        seed: int,
        resume_at: dict[str, int | None] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.seed = seed
        self._position: dict[str, int | None] = {"epoch": None, "batches": 0}
        self._resume_at = dict(resume_at) if resume_at else None
        self._skip = 0  # batches the next pass over the index sampler leaves out

    def state_dict(self) -> dict[str, int | None]:
        return dict(self._position)

    def load_state_dict(self, state: dict[str, int | None]) -> None:
        self._resume_at = dict(state)

    @property
    def _index_sampler(self) -> "_SkipFirst":  # what DataLoader's iterators draw indices from
        return _SkipFirst(super()._index_sampler, self)

    def _sampler_epoch(self) -> int | None:
        for sampler in (getattr(self.batch_sampler, "sampler", None), self.sampler):
            epoch = getattr(sampler, "epoch", None)
            if isinstance(epoch, int):
                return epoch
        return None

    def _batches_to_skip(self, epoch: int | None) -> int:
        resume, self._resume_at = self._resume_at, None
        if resume is None or resume.get("epoch") != epoch:
            return 0  # a fresh run, or the checkpoint's epoch had ended
        done = int(resume.get("batches") or 0)
        return done if done < len(self) else 0

    def __iter__(self) -> Iterator[Any]:
        # A generator, so nothing is drawn before the first batch is asked for: by then Lightning
        # has called set_epoch for this epoch, also for the epoch a resumed run continues.
        epoch = self._sampler_epoch()
        self.generator = loader_generator(self.seed, epoch or 0)
        self._skip = self._batches_to_skip(epoch)
        self._position = {"epoch": epoch, "batches": self._skip}
        batches = super().__iter__()  # reads the index sampler: once, or twice with workers
        self._skip = 0
        for batch in batches:
            self._position["batches"] += 1
            yield batch


class _SkipFirst:
    """The loader's index sampler, less the batches its pending resume has done already."""

    def __init__(self, sampler: Any, loader: ResumableLoader) -> None:
        self.sampler, self.loader = sampler, loader

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.sampler), self.loader._skip, None)

    def __len__(self) -> int:
        return len(self.sampler)
