"""Seeds of the draws made anew each epoch (training bags, text batch orders)."""

import numpy as np
import torch


def epoch_seed(seed: int, epoch: int, stream: int = 0) -> int:
    """The seed of one epoch's draw: a function of (seed, epoch) only, so a resumed run draws
    epoch k as the uninterrupted run did, and no (seed, epoch) repeats another's draw (as
    `seed + epoch` would: seed 1's epoch 0 was seed 0's epoch 1). Epoch 0 draws from `seed`
    itself.

    `stream` > 0 names a second, independent draw of the same epoch (the training digits'
    shifts), so adding it leaves stream 0's draws as they were."""
    if stream:
        entropy = [seed, epoch, stream]
    elif epoch == 0:
        return seed
    else:
        entropy = [seed, epoch]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0])


WORKER_STREAM = 2  # epoch_seed stream of the loaders' base seeds (the bags' shifts are stream 1)


def loader_generator(seed: int, epoch: int = 0) -> torch.Generator:
    """The generator a DataLoader draws its base seed from (what its workers are seeded with) when
    an iteration starts. Without one it draws from torch's global generator, whose state a
    resumed run restores only at its first training batch, after its loader started: the
    uninterrupted run's next draw would then be another."""
    return torch.Generator().manual_seed(epoch_seed(seed, epoch, WORKER_STREAM))
