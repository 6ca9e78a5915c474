"""Known-answer tests of the faithfulness measures on tiny models (tests/faithfulness/known_models.py)."""

import math

import pytest
import torch

from attnexp.faithfulness import Settings, Subject, erase, explain_batch, summarise_columns
from attnexp.faithfulness.attention import attention_maps, rollout
from attnexp.faithfulness.measures import (
    erasure_counts,
    kendall_tau,
    shuffled,
    summarise,
    top_k_overlap,
    uniform,
)
from attnexp.models.self_attention import SelfAttentionClassifier
from attnexp.modules.mhsa import MultiHeadAttention
from tests.faithfulness.known_models import (
    PooledBagModel,
    PooledTokenModel,
    marked_bags,
    marked_texts,
)

SETTINGS = Settings(ig_steps=16, top_k=2, permutations=8, erasure_steps=4)


def explain(sharpness: float, item_labels: bool = False):
    inputs, labels, marked = marked_bags()
    digits = None
    if item_labels:  # the marked item carries the label, the others another
        digits = torch.full(inputs["mask"].shape, 9)
        digits[torch.arange(len(labels)), marked] = labels
    subject = Subject(PooledBagModel(sharpness), "bags")
    columns, scores = explain_batch(
        subject, inputs, labels, SETTINGS, torch.Generator().manual_seed(0), digits
    )
    return columns, scores, marked


def test_a_model_reading_one_item_is_found_by_every_faithful_method():
    columns, scores, marked = explain(sharpness=50.0, item_labels=True)
    assert columns["correct"].all()
    for name, importance in scores.items():
        assert torch.equal(importance.argmax(dim=1), marked), name
    # erasing the top item of any faithful order flips the decision at once: 1 of 5 items
    for order in ("attention", "gradient_x_input", "integrated_gradients", "leave_one_out"):
        assert torch.allclose(columns[f"erasure/{order}"], torch.tensor(0.2)), order
        assert columns[f"ground_truth/{order}"].all(), order
    assert columns["ground_truth/random"].eq(0.2).all()  # one item of five carries the label
    # moving the one-hot weights onto another item reverses the evidence: most shuffles flip
    assert columns["permutation/median_change"].min() > 0.5
    assert columns["permutation/flip_share"].mean() > 0.5
    assert columns["uniform/correct"].eq(0).all()


def test_a_text_model_reading_one_token_is_found_through_its_embedding():
    inputs, labels, marked = marked_texts()
    subject = Subject(PooledTokenModel(sharpness=50.0), "tokens")
    columns, scores = explain_batch(
        subject, inputs, labels, SETTINGS, torch.Generator().manual_seed(0)
    )
    assert columns["correct"].all()
    for name, importance in scores.items():
        assert torch.equal(importance.argmax(dim=1), marked), name
        assert importance[:, -1].eq(0).all(), name  # padding is never important
    assert torch.allclose(columns["erasure/integrated_gradients"], torch.tensor(0.2))


def test_uniform_weights_show_no_permutation_effect():
    columns, _, _ = explain(sharpness=0.0)
    assert columns["permutation/median_change"].abs().max() < 1e-6
    assert columns["permutation/flip_share"].eq(0).all()
    summary = summarise_columns(columns)
    assert summary["uniform"]["accuracy_drop"] == 0.0
    assert summary["permutation"]["examples_ever_flipped"] == 0.0
    # every item weighted alike ranks none above another: tau does not apply
    assert summary["rank_agreement"]["attention"]["leave_one_out"]["kendall_tau"]["n"] == 0


def test_kendall_tau_of_known_orders():
    mask = torch.tensor([[True] * 4, [True] * 4, [True, True, False, False], [True] + [False] * 3])
    a = torch.tensor([[1.0, 2, 3, 4], [1, 2, 3, 4], [1, 2, 9, 9], [1, 0, 0, 0]])
    b = torch.tensor([[2.0, 4, 6, 8], [4, 3, 2, 1], [2, 1, -9, 9], [1, 0, 0, 0]])
    tau = kendall_tau(a, b, mask)
    assert tau[:3].tolist() == [1.0, -1.0, -1.0]  # padding (row 2's 9s) is never compared
    assert math.isnan(tau[3])  # one item: nothing to order
    # tau-b with a tie: (C - D) / sqrt((n0 - n1)(n0 - n2)) = (4 - 0) / sqrt(5 * 6)
    tied = kendall_tau(torch.tensor([[1.0, 1, 2, 3]]), torch.tensor([[1.0, 2, 3, 4]]), mask[:1])
    assert tied.item() == pytest.approx(5 / math.sqrt(30))


def test_top_k_overlap_leaves_one_item_out():
    mask = torch.ones(1, 3, dtype=torch.bool)
    a, b = torch.tensor([[3.0, 2, 1]]), torch.tensor([[1.0, 2, 3]])
    # k=5 on 3 items is cut to 2: {0, 1} against {2, 1}
    assert top_k_overlap(a, b, mask, k=5).item() == 0.5
    assert top_k_overlap(a, a, mask, k=1).item() == 1.0


def test_shuffled_moves_weights_over_real_positions_only():
    weights = torch.tensor([[0.7, 0.2, 0.1, 0.0, 0.0]]).repeat(50, 1)
    mask = torch.tensor([[True, True, True, False, False]]).repeat(50, 1)
    out = shuffled(weights, mask, torch.Generator().manual_seed(0))
    assert out[:, 3:].eq(0).all()
    assert torch.allclose(out.sort(dim=1, descending=True).values, weights)
    assert len({tuple(row.tolist()) for row in out}) == 6  # every order of three appears


def test_erase_keeps_order_and_pads_the_end():
    inputs = {
        "input_ids": torch.tensor([[5, 6, 7, 0]]),
        "mask": torch.tensor([[1, 1, 1, 0]]).bool(),
    }
    out = erase(inputs, torch.tensor([[False, True, False, False]]))
    assert out["input_ids"][0, :2].tolist() == [5, 7]
    assert out["mask"].tolist() == [[True, True, False, False]]


def test_erasure_counts_keep_one_position():
    counts = erasure_counts(torch.tensor([10, 3, 1]), steps=4)
    assert counts.tolist() == [[3, 5, 7, 9], [1, 1, 2, 2], [1, 1, 1, 1]]


def test_rollout_of_known_attention():
    B, T = 1, 3
    everything_to_first = torch.zeros(B, 1, T, T)
    everything_to_first[..., 0] = 1.0
    flow = rollout([everything_to_first, everything_to_first])
    assert torch.allclose(flow.sum(dim=-1), torch.ones(B, T))
    # one layer: half to the first token, half kept; two layers: 3/4 from the first token
    assert flow[0, 1].tolist() == pytest.approx([0.75, 0.25, 0.0])
    maps = attention_maps([everything_to_first], torch.ones(B, T, dtype=torch.bool))
    assert maps["attention"][0].tolist() == [1.0, 0.0, 0.0]
    assert maps["rollout"][0].tolist() == pytest.approx([1.0, 0.0, 0.0])


def test_self_attention_maps_per_head_and_mean():
    weights = torch.zeros(1, 2, 3, 3)
    weights[0, 0, :, 0] = 1.0  # head 0: every query on token 0
    weights[0, 1, :, 2] = 1.0  # head 1: on token 2
    maps = attention_maps(weights, torch.ones(1, 3, dtype=torch.bool))
    assert maps["head0"][0].tolist() == [1.0, 0.0, 0.0]
    assert maps["attention"][0].tolist() == [0.5, 0.0, 0.5]


def test_pairs_keep_cls_and_sep():
    ids = torch.tensor([[1, 7, 8, 2, 9, 2, 0]])
    inputs = {
        "input_ids": ids,
        "segment_ids": torch.tensor([[0, 0, 0, 0, 1, 1, 0]]),
        "mask": ids != 0,
    }
    model = torch.nn.Sequential(torch.nn.Embedding(10, 2, padding_idx=0))
    removable = Subject(model, "pairs").removable(inputs)
    assert removable.tolist() == [[False, True, True, False, True, False, False]]


def test_summarise_leaves_out_what_does_not_apply():
    summary = summarise([1.0, 2.0, 3.0, float("nan")])
    assert summary["n"] == 3 and summary["not_applicable"] == 1
    assert summary["median"] == 2.0 and summary["q1"] == 1.5 and summary["q3"] == 2.5


def test_settings_name_the_bad_value():
    with pytest.raises(ValueError, match="ig_steps=0"):
        Settings(ig_steps=0)


@pytest.mark.parametrize("attention", ["mhsa", "simple"])
def test_self_attention_weights_replaced_by_themselves_change_nothing(attention):
    """The hook recomputes the layer as the layer does: the same weights give the same output,
    uniform ones another."""
    torch.manual_seed(0)
    model = SelfAttentionClassifier(20, 2, num_heads=2, attention=attention, embed_dim=8)
    ids = torch.tensor([[3, 5, 7, 9, 0, 0], [4, 6, 8, 10, 12, 14]])
    inputs = {"input_ids": ids, "mask": ids != 0}
    subject = Subject(model, "tokens")
    with torch.no_grad():
        plain = subject.probabilities(inputs)
        with subject.weights_replaced(lambda w, m: w):
            same = subject.probabilities(inputs)
        with subject.weights_replaced(uniform):
            evened = subject.probabilities(inputs)
    assert torch.allclose(plain, same, atol=1e-6)
    assert not torch.allclose(plain, evened, atol=1e-4)


def test_a_stacked_encoder_has_no_one_layer_to_replace():
    model = torch.nn.Sequential(MultiHeadAttention(8, 2), MultiHeadAttention(8, 2))
    assert Subject(model, "tokens").attention_layer is None
