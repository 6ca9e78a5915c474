"""Networks assembled from `attnexp.modules` (framework-free).

Each model class declares `input_kind`: the kind of batch it reads, which the DataModule it is
paired with must provide (checked by the runner). Every forward returns a `ModelOutput`.
"""

from attnexp.models.output import ModelOutput

__all__ = ["ModelOutput"]
