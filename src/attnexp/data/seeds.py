"""Seeds of the draws made anew each epoch (training bags, text batch orders)."""

import numpy as np


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
