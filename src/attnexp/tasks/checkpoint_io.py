"""Checkpoints that are whole or absent: written beside their final name and renamed into it.

Lightning's own writer copies a temporary file from the system's temp folder to the final name;
across file systems that copy is not atomic, and on a full disk it left a truncated checkpoint
under the best checkpoint's name (which evaluate then could not read)."""

import os
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        if storage_options is not None:  # as Lightning's own writer: it takes none either
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            with partial.open("wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            partial.replace(path)
        except OSError as err:  # named as the checkpoint it was to be, not the temporary file
            raise OSError(err.errno, err.strerror, str(path)) from err
        finally:
            partial.unlink(missing_ok=True)  # a failed write leaves nothing behind
