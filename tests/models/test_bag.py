import pytest
import torch
from config_refusals import refusal
from hydra.utils import instantiate

from attnexp.errors import ConfigError
from attnexp.models.bag import BagAttention, BagMLP
from attnexp.modules import AdditiveScorer, DotScorer
from attnexp.modules.masking import lengths_to_mask, masked_mean

B, T, S, C = 4, 3, 28, 10


def bags(sizes=(3, 2, 1, 3), max_size=T):
    torch.manual_seed(0)
    mask = lengths_to_mask(torch.tensor(sizes), max_size)
    items = torch.randn(len(sizes), max_size, 1, S, S) * mask[:, :, None, None, None]
    return items, mask


@pytest.mark.parametrize("backbone", ["mlp", "conv"])
@pytest.mark.parametrize(
    "attention,scorer", [("simple", None), ("context", AdditiveScorer), ("context", DotScorer)]
)
def test_bag_attention_shapes_weights_and_padding(backbone, attention, scorer):
    torch.manual_seed(0)
    model = BagAttention(
        C, S, hidden_size=16, backbone=backbone, attention=attention, scorer=scorer
    ).eval()
    items, mask = bags()
    output = model(items, mask, return_attention=True)
    logits, weights = output.logits, output.attention
    assert logits.shape == (B, C) and weights.shape == (B, T)
    assert torch.allclose(weights.sum(-1), torch.ones(B)) and (weights[~mask] == 0).all()
    assert torch.equal(model(items, mask).logits, logits)
    noisy = items.clone()
    noisy[~mask] = 7.0  # padded slots' content must not matter
    assert torch.allclose(model(noisy, mask).logits, logits, atol=1e-5)


def test_bag_attention_any_bag_size_and_gradients():
    model = BagAttention(C, S, hidden_size=16, scorer=AdditiveScorer)
    items, mask = bags((7, 1), max_size=7)
    model(items, mask).logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_context_attention_scores_each_bag_against_its_own_mean():
    """The book's context net: each digit is scored against its bag's mean feature (padding
    left out), not a learned query that would score every bag against the same vector."""
    torch.manual_seed(0)
    model = BagAttention(C, S, hidden_size=16, scorer=DotScorer).eval()
    items, mask = bags()
    weights = model(items, mask, return_attention=True).attention
    features = model.backbone(items.flatten(0, 1)).view(B, T, -1)  # (B, T, H)
    scores = torch.einsum("bth,bh->bt", features, masked_mean(features, mask)).masked_fill(
        ~mask, float("-inf")
    )
    torch.testing.assert_close(weights, scores.softmax(-1))
    assert not any(name.startswith("pool.") for name, _ in model.named_parameters())


def test_the_classifier_is_the_books_for_each_attention(compose_cfg):
    """The book's context net (SmarterAttentionNet, conf/model/bag_attn.yaml) normalises the
    pooled vector before its prediction net; its simple attention net does not (pooled_norm=false)."""

    def head(*overrides):
        cfg = compose_cfg("model=bag_attn", *overrides)
        return instantiate(cfg.model, num_classes=C, image_size=S, _convert_="partial").head

    kinds = lambda h: [type(m).__name__ for m in h]  # noqa: E731
    plain = ["Linear", "LeakyReLU", "BatchNorm1d", "Linear"]
    assert kinds(head("scorer=dot")) == ["BatchNorm1d", *plain]
    assert kinds(head("model.attention=simple", "model.pooled_norm=false")) == plain
    assert kinds(head("scorer=dot", "model.pooled_norm=false")) == plain
    assert kinds(BagAttention(C, S, hidden_size=16, scorer=DotScorer).head) == plain


def test_bag_mlp_pads_smaller_bags_and_rejects_larger():
    model = BagMLP(C, bag_size=T, image_size=S, hidden_size=16).eval()
    items, mask = bags()
    logits = model(items, mask).logits
    assert logits.shape == (B, C)
    noisy = items.clone()
    noisy[~mask] = 7.0  # a padded slot reads as empty, whatever it holds
    assert torch.equal(model(noisy, mask).logits, logits)
    output = model(items[:, :2], mask[:, :2], return_attention=True)
    logits2, attention = output.logits, output.attention
    assert logits2.shape == (B, C) and attention is None
    with pytest.raises(ConfigError, match="at most 3 items, got 4"):
        model(*bags((4, 4), max_size=4))


def test_errors():
    sizes = {"num_classes": C, "image_size": S}
    assert refusal(BagAttention, runtime=sizes, attention="global") == (
        "model.attention='global' is not one of simple, context (set model.attention=...)"
    )
    with pytest.raises(ValueError, match="attention=context needs a scorer"):
        BagAttention(C, S, attention="context", scorer=None)
    assert refusal(BagAttention, runtime=sizes, attention="simple", backbone="resnet") == (
        "model.backbone='resnet' is not one of mlp, conv (set model.backbone=...)"
    )
