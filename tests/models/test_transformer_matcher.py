import pytest
import pytorch_lightning as pl
import torch
from config_refusals import refusal
from lcqmc_data import write_lcqmc

from attnexp.models.transformer import TransformerMatcher, exact_match
from attnexp.runner.build import build

SMALL = {"vocab_size": 30, "hidden_size": 8, "num_heads": 2, "ffn_size": 16, "max_seq_len": 16}


def pair_batch():
    ids = torch.tensor([[2, 5, 6, 3, 7, 8, 3], [2, 9, 3, 4, 3, 0, 0]])
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0]])
    return ids, segments, ids != 0


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"impl": "torch"},
        {"norm": "pre"},
        {"position": "learned"},
        {"num_layers": 1},
        {"impl": "torch", "norm": "pre"},
        {"match_embedding": True, "unk_id": 1},
    ],
)
def test_shapes_attention_and_padding_invariance(options):
    torch.manual_seed(0)
    model = TransformerMatcher(**SMALL, **options).eval()
    ids, segments, mask = pair_batch()
    output = model(ids, segments, mask, return_attention=True)
    logits, attention = output.logits, output.attention
    assert logits.shape == (2, 2)
    assert len(attention) == options.get("num_layers", 2) and attention[0].shape == (2, 2, 7, 7)
    assert torch.all(attention[-1][1, :, :, 5:] == 0)  # padded keys get no weight
    changed = ids.clone()
    changed[1, 5:] = 17  # other content at the padded positions
    assert torch.allclose(model(changed, segments, mask).logits, logits, atol=1e-5)
    assert torch.allclose(
        model(ids, segments, mask).logits, logits, atol=1e-5
    )  # with and without weights


def test_exact_match_feature():
    ids, segments, mask = pair_batch()
    ids[0, 5] = 6  # "6" now occurs in both sentences of pair 0
    expected = [[0, 0, 1, 1, 0, 1, 1], [0, 0, 1, 0, 1, 0, 0]]  # [SEP] is in both; padding never
    assert exact_match(ids, segments, mask, unk_id=1).int().tolist() == expected


def test_exact_match_never_matches_unknown_tokens():
    """Two different unseen characters both read as [UNK]: that is no evidence of a match."""
    ids, segments, mask = pair_batch()
    ids[0, 1] = ids[0, 4] = 1  # an [UNK] in each sentence of pair 0
    assert exact_match(ids, segments, mask, unk_id=99)[0, [1, 4]].tolist() == [True, True]
    assert exact_match(ids, segments, mask, unk_id=1)[0, [1, 4]].tolist() == [False, False]
    assert exact_match(ids, segments, mask, unk_id=1)[0, 3]  # [SEP] still matches


def test_matcher_passes_unk_id_to_the_match_feature():
    torch.manual_seed(0)
    model = TransformerMatcher(**SMALL, match_embedding=True, unk_id=1).eval()
    # the match feature starts small, N(0, 0.02^2) like the segments, beside unit-variance tokens
    assert model.match.weight.std().item() < 0.1
    other_unk = TransformerMatcher(**SMALL, match_embedding=True, unk_id=29).eval()
    other_unk.load_state_dict(model.state_dict())
    ids, segments, mask = pair_batch()
    assert torch.equal(
        model(ids, segments, mask).logits, other_unk(ids, segments, mask).logits
    )  # no [UNK]
    ids[0, 1], ids[0, 4] = 1, 1  # an [UNK] in each sentence of pair 0
    assert not torch.equal(
        model(ids, segments, mask).logits[0], other_unk(ids, segments, mask).logits[0]
    )


def test_match_embedding_needs_the_unk_id():
    with pytest.raises(ValueError, match=r"match_embedding=true needs unk_id"):
        TransformerMatcher(**SMALL, match_embedding=True)
    TransformerMatcher(**SMALL)  # no match feature: no [UNK] id needed


def test_the_cls_state_reaches_the_classifier_through_final_norm_and_pooler():
    """Pre-norm blocks leave the residual stream unnormalised: the [CLS] state must go through
    final_norm, then the BERT pooler, or those layers train for nothing."""
    torch.manual_seed(0)
    ids, segments, mask = pair_batch()
    model = TransformerMatcher(**SMALL, norm="pre").eval()
    with torch.no_grad():
        model.final_norm.weight.zero_()
        model.final_norm.bias.zero_()
        logits = model(
            ids, segments, mask
        ).logits  # a zeroed final norm lets nothing of a pair through
        assert torch.allclose(logits[0], logits[1])
        model = TransformerMatcher(**SMALL).eval()
        model.pooler[0].weight.zero_()
        model.pooler[0].bias.zero_()  # tanh(0) = 0: only the classifier's bias is left
        assert torch.allclose(
            model(ids, segments, mask).logits, model.classifier.bias.expand(2, -1)
        )


def test_custom_and_torch_have_the_same_parameter_count():
    counts = [
        sum(p.numel() for p in TransformerMatcher(**SMALL, impl=impl).parameters())
        for impl in ("custom", "torch")
    ]
    assert counts[0] == counts[1]


def test_matcher_errors():
    """Sizes and rates are the schema's to refuse (tests/test_schema.py); the rest the model's,
    said with the keys by the runner."""
    sizes = {"vocab_size": 30, "max_seq_len": 16}
    small = {k: v for k, v in SMALL.items() if k not in sizes}
    assert refusal(TransformerMatcher, runtime=sizes, **small, impl="keras") == (
        "model.impl='keras' is not one of custom, torch (set model.impl=...)"
    )
    assert refusal(
        TransformerMatcher, runtime=sizes, **small, impl="torch", dropout=0.1, attention_dropout=0.2
    ) == (
        "model.impl='torch' has one dropout rate: model.attention_dropout=0.2 must equal "
        "model.dropout=0.1 (or model.impl='custom') (set model.impl=... or "
        "model.attention_dropout=... or model.dropout=...)"
    )
    message = refusal(TransformerMatcher, runtime=sizes, **small, match_embedding=True)
    assert message.startswith("model.match_embedding=true needs unk_id")


def test_the_pooled_cls_state_passes_through_model_dropout():
    """model.dropout acts between the pooler and the classifier too (BERT's head), in training."""
    ids, segments, mask = pair_batch()
    torch.manual_seed(0)
    model = TransformerMatcher(**SMALL, dropout=0.0, attention_dropout=0.0).train()
    model.dropout.p = 1.0  # everything dropped: only the classifier's bias is left
    logits = model(ids, segments, mask).logits
    torch.testing.assert_close(logits, model.classifier.bias.expand(2, -1))
    assert not torch.allclose(model.eval()(ids, segments, mask).logits, logits)


VARIANTS = [
    ["model=transformer"],
    ["model=transformer", "model.impl=torch", "model.norm=pre", "model.position=learned"],
    ["experiment=lcqmc/chapter", "model.hidden_size=16", "model.ffn_size=32"],
    ["experiment=lcqmc/tuned", "model.hidden_size=16", "model.ffn_size=32"],
    [
        "experiment=lcqmc/ablation",
        "model.hidden_size=16",
        "model.ffn_size=32",
        "model.num_layers=4",
    ],
]


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: " ".join(o))
def test_fast_dev_run(compose_cfg, tmp_path, overrides):
    write_lcqmc(tmp_path / "data", {"dev": 40, "test": 16})
    cfg = compose_cfg(
        *overrides,
        "data.train_split=dev",
        "data.cache_dir=null",
        "model.hidden_size=16",
        "model.ffn_size=32",
    )
    assert cfg.optimizer._target_ == "torch.optim.AdamW" and cfg.scheduler is not None
    datamodule, task = build(cfg, dict(cfg.hydra.runtime.choices))
    trainer = pl.Trainer(
        fast_dev_run=True,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(task, datamodule=datamodule)
    trainer.test(task, datamodule=datamodule, verbose=False)
    assert "test/acc" in trainer.callback_metrics


def test_a_config_with_a_renamed_key_names_the_new_one():
    """A config with the old key (a saved run's, or `+model.heads=`): its new name, not "takes
    no argument"."""
    sizes = {"vocab_size": 30, "max_seq_len": 16}
    assert refusal(TransformerMatcher, runtime=sizes, heads=2).startswith(
        "model.heads is now called model.num_heads (write model.num_heads for model.heads"
    )
