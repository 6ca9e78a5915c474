import torch

from attnexp.data.base import fingerprint


def test_fingerprints_tell_splits_apart_by_content_only():
    texts, labels = ["a good film", "a bad one"], [1, 0]
    assert fingerprint(texts, labels) == fingerprint(list(texts), tuple(labels))
    assert fingerprint(texts, labels) != fingerprint(texts, [0, 1])  # labels flipped
    assert fingerprint(texts, labels) != fingerprint(["a good film", "a bad one!"], labels)
    assert fingerprint(["ab"], ["c"]) != fingerprint(["a"], ["bc"])  # where one part ends
    images = torch.zeros(3, 4, 4, dtype=torch.uint8)
    changed = images.clone()
    changed[1, 2, 3] = 1
    assert fingerprint(images, torch.arange(3)) != fingerprint(changed, torch.arange(3))
    assert fingerprint(images[:, :2].transpose(1, 2), torch.arange(3))  # any layout hashes
