import re

import pytest
import torch
from config_refusals import refusal
from imdb_data import token_batch

from attnexp.errors import ConfigError
from attnexp.models.lstm import LSTMAttention, LSTMMean, LSTMSelfAttention
from attnexp.models.self_attention import SelfAttentionClassifier
from attnexp.modules import AdditiveScorer, DotScorer

V, B, T = 50, 3, 7


@pytest.fixture
def batch():
    return token_batch(V)  # lengths 7, 4, 1


MODELS = {  # each takes further model settings as keywords
    "mean": lambda **kw: LSTMMean(V, 2, embed_dim=8, hidden_size=4, **kw),
    "additive": lambda **kw: LSTMAttention(
        V, 2, scorer=AdditiveScorer, embed_dim=8, hidden_size=4, **kw
    ),
    "dot": lambda **kw: LSTMAttention(
        V, 2, scorer=DotScorer, embed_dim=8, hidden_size=4, num_layers=2, **kw
    ),
    "mhsa": lambda **kw: LSTMSelfAttention(V, 2, num_heads=2, embed_dim=8, hidden_size=4, **kw),
    "mhsa_norm": lambda **kw: LSTMSelfAttention(
        V, 2, num_heads=2, attn_norm="layer", embed_dim=8, hidden_size=4, **kw
    ),
    "simple": lambda **kw: LSTMSelfAttention(
        V, 2, attention="simple", embed_dim=8, hidden_size=4, **kw
    ),
    "no_lstm": lambda **kw: SelfAttentionClassifier(
        V, 2, num_heads=2, embed_dim=8, max_seq_len=T, **kw
    ),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_padding_is_ignored(name, batch):
    ids, mask = batch
    torch.manual_seed(1)
    model = MODELS[name]().eval()
    output = model(ids, mask, return_attention=True)
    logits, attention = output.logits, output.attention
    assert logits.shape == (B, 2) and torch.isfinite(logits).all()
    other = ids.masked_fill(~mask, 7)  # change what sits in the padded slots
    torch.testing.assert_close(model(other, mask).logits, logits)
    if attention is not None:
        if attention.ndim == 2:  # pooling weights (B, T)
            assert (attention[~mask] == 0).all()
            torch.testing.assert_close(attention.sum(-1), torch.ones(B))
        else:  # (B, nh, T, T): keys that are padding get weight 0
            assert (attention.transpose(1, 3)[~mask] == 0).all()


@pytest.mark.parametrize("name", list(MODELS))
def test_a_reviews_logits_do_not_depend_on_its_batch(name, batch):
    """Each row gives the logits it gives alone, unpadded: no model averages or attends over the
    padding its batch-mates' lengths add (the mean baseline divides by the real tokens only)."""
    ids, mask = batch
    torch.manual_seed(1)
    model = MODELS[name]().eval()
    logits = model(ids, mask).logits
    for b, n in enumerate(mask.sum(1).tolist()):
        alone = model(ids[b : b + 1, :n], mask[b : b + 1, :n]).logits
        torch.testing.assert_close(alone[0], logits[b], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_flow(name, batch):
    ids, mask = batch
    model = MODELS[name]()
    model(ids, mask).logits.sum().backward()
    embedding = model.embedding if name == "no_lstm" else model.encoder.embedding
    assert model.head.weight.grad is not None and embedding.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "name,setting",
    [
        ("mean", "dropout"),
        ("additive", "dropout"),
        ("mhsa", "dropout"),
        ("no_lstm", "embed_dropout"),
        ("mhsa", "attn_dropout"),
    ],
)
def test_dropout_acts_in_training_only(name, setting, batch):
    """model.dropout (before the head) and model.embed_dropout (without the LSTM, the only
    thing between embeddings and attention) regularise training and leave evaluation alone.
    One layer and no other dropout, so each setting is the only source of noise."""
    ids, mask = batch
    torch.manual_seed(0)
    model = MODELS[name](**{setting: 0.5}).eval()
    assert torch.equal(model(ids, mask).logits, model(ids, mask).logits)
    model.train()
    assert not torch.allclose(model(ids, mask).logits, model(ids, mask).logits)


def test_a_model_without_lstm_has_no_lstm_weights():
    """The self-attention classifier runs no LSTM, and has none in its checkpoints or parameter
    counts."""
    assert not [k for k in MODELS["no_lstm"]().state_dict() if "lstm" in k]
    assert [k for k in MODELS["mhsa"]().state_dict() if k.startswith("encoder.lstm.")]


def test_attention_shapes(batch):
    ids, mask = batch
    assert MODELS["mean"]()(ids, mask, return_attention=True).attention is None
    assert MODELS["dot"]()(ids, mask, return_attention=True).attention.shape == (B, T)
    assert MODELS["mhsa"]()(ids, mask, return_attention=True).attention.shape == (B, 2, T, T)
    assert MODELS["simple"]()(ids, mask, return_attention=True).attention.shape == (B, 1, T, T)
    assert MODELS["no_lstm"]()(ids, mask, return_attention=True).attention.shape == (B, 2, T, T)
    for name in MODELS:  # not asked for: one type all the same, without the weights
        assert MODELS[name]()(ids, mask).attention is None


def test_embed_init():
    torch.manual_seed(0)
    normal = LSTMMean(1000, 2, embed_dim=64).encoder.embedding.weight
    xavier = LSTMMean(1000, 2, embed_dim=64, embed_init="xavier").encoder.embedding.weight
    bound = (6 / (1000 + 64)) ** 0.5
    assert normal.std() > 0.9  # torch's N(0, 1)
    assert xavier.abs().max() <= bound and xavier.std() > bound / 3
    assert (normal[0] == 0).all() and (xavier[0] == 0).all()  # the padding row stays zero


def test_query_init():
    torch.manual_seed(0)
    normal = LSTMAttention(V, 2, scorer=DotScorer, hidden_size=64).attention.query
    uniform = LSTMAttention(V, 2, scorer=DotScorer, hidden_size=64, query_init="uniform")
    query = uniform.attention.query
    assert normal.std() < 0.1  # N(0, 1/128)
    assert query.abs().max() <= 0.5 and query.std() > 0.2  # U(-0.5, 0.5): std 0.29
    assert query.requires_grad


@pytest.mark.parametrize(
    "build",
    [
        lambda init: LSTMMean(V, 2, linear_init=init),
        lambda init: LSTMAttention(V, 2, scorer=AdditiveScorer, linear_init=init),
        lambda init: LSTMSelfAttention(V, 2, num_heads=2, hidden_size=4, linear_init=init),
        lambda init: SelfAttentionClassifier(V, 2, num_heads=2, embed_dim=8, linear_init=init),
    ],
)
def test_linear_init_reaches_every_linear_layer_and_no_other(build):
    torch.manual_seed(0)
    torch_model = build("torch")
    torch.manual_seed(0)
    xavier_model = build("xavier")
    linears = [m for m in xavier_model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.bias is None or (m.bias == 0).all() for m in linears)
    assert any((m.bias != 0).any() for m in torch_model.modules() if isinstance(m, torch.nn.Linear))
    # Embeddings and LSTM are built first from the same seed and keep their own init.
    xavier_params = dict(xavier_model.named_parameters())
    for name, param in torch_model.named_parameters():
        if name.startswith(("encoder.", "embedding.")):
            assert torch.equal(param, xavier_params[name]), name


def test_config_errors():
    sizes = {"vocab_size": V, "num_classes": 2}
    # The size to change is the LSTM's with it, the embedding's without.
    assert refusal(LSTMSelfAttention, runtime=sizes, num_heads=3, hidden_size=4) == (
        "model.num_heads=3 must divide the 8 features (2 * model.hidden_size=4) "
        "(set model.num_heads=... or model.hidden_size=...)"
    )
    message = refusal(SelfAttentionClassifier, runtime=sizes, num_heads=3, embed_dim=8)
    assert message.endswith("(set model.num_heads=... or model.embed_dim=...)")
    # -2 divides 8: the layer refuses it
    message = refusal(LSTMSelfAttention, runtime=sizes, num_heads=-2, hidden_size=4)
    assert message.startswith("model.num_heads=-2 must be a positive divisor")
    assert "(set model.attention=...)" in refusal(
        LSTMSelfAttention, runtime=sizes, attention="cosine"
    )
    assert refusal(
        LSTMSelfAttention, runtime=sizes, num_heads=2, hidden_size=4, attn_norm="batch"
    ) == ("model.attn_norm='batch' is not one of none, layer (set model.attn_norm=...)")
    with pytest.raises(ValueError, match="needs a scorer"):
        LSTMAttention(V, 2, scorer=None)
    assert "(set model.embed_init=...)" in refusal(LSTMMean, runtime=sizes, embed_init="zeros")
    assert "(set model.linear_init=...)" in refusal(LSTMMean, runtime=sizes, linear_init="paddle")
    with pytest.raises(ValueError, match="query_init='zeros'"):
        LSTMAttention(V, 2, scorer=DotScorer, query_init="zeros")
    message = refusal(
        SelfAttentionClassifier, runtime={**sizes, "vocab_size": 1720}, embed_dim=8,
        num_heads=2, embed_init="xavier",
    )  # fmt: skip
    assert re.match(
        r"model.embed_init=xavier must be normal.*std 0.034.*\(set model.embed_init=", message
    )
    with pytest.raises(
        ConfigError,
        match=r"5 tokens is longer than the model.s max_seq_len=3 \(set data.max_seq_len <= 3",
    ):
        SelfAttentionClassifier(V, 2, num_heads=2, embed_dim=8, max_seq_len=3)(
            torch.ones(1, 5, dtype=torch.long), torch.ones(1, 5, dtype=torch.bool)
        )


def test_attn_norm_layer_gives_the_self_attention_normalised_features(batch):
    """Each token's features reach the self-attention with mean 0 and variance 1 (LayerNorm's
    start); with "none" they come as the BiLSTM gives them (small)."""
    ids, real = batch
    seen = {}
    for norm in ("none", "layer"):
        model = MODELS["mhsa"](attn_norm=norm)
        model.self_attention.register_forward_hook(
            lambda _m, args, _out, norm=norm: seen.update({norm: args[0]})
        )
        model(ids, real)
    normed = seen["layer"][real]
    assert torch.allclose(normed.mean(-1), torch.zeros(len(normed)), atol=1e-5)
    assert torch.allclose(normed.var(-1, unbiased=False), torch.ones(len(normed)), atol=1e-3)
    assert seen["none"][real].pow(2).mean() < 0.5


# --- end to end on tiny generated reviews ---------------------------------------------------------
import json  # noqa: E402
from pathlib import Path  # noqa: E402

from cli_helpers import run_cli_in_process  # noqa: E402
from imdb_data import TINY_MODEL, train_in_process, write_imdb  # noqa: E402

FDR_RUNS = {
    "lstm_mean": [],
    "lstm_attn": ["scorer=bilinear"],
    "lstm_mhsa": ["model.num_heads=4"],
    "lstm_mhsa_simple": ["model.attention=simple"],
    "self_attn": [],
}


@pytest.mark.parametrize("name", list(FDR_RUNS))
def test_fast_dev_run(name, compose_cfg, tmp_path):
    write_imdb(tmp_path / "data")
    model = "lstm_mhsa" if name.startswith("lstm_mhsa") else name  # lstm_mhsa_simple: lstm_mhsa
    cfg = compose_cfg(
        f"model={model}",
        *FDR_RUNS[name],
        *(o for o in TINY_MODEL if name != "self_attn" or "hidden_size" not in o),  # no LSTM
        f"data.cache_dir={tmp_path}/cache",
        "trainer.fast_dev_run=true",
    )
    metrics = train_in_process(cfg, tmp_path / "run")
    assert 0.0 <= metrics["test/acc"] <= 1.0
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["status"] == "completed" and record["data_source"] == "local"
    assert (tmp_path / "run" / "tokenizer.json").is_file()


@pytest.mark.parametrize(
    "overrides, views",
    [
        (["model=lstm_attn", "scorer=dot"], ["pooling"]),
        (["model=lstm_mhsa", "model.num_heads=2"], ["head0", "head1"]),
    ],
)
def test_probe_heatmaps_reach_tensorboard(overrides, views, compose_cfg, tmp_path):
    """Each validation draws the probe sentences' attention: one image a view (per head for MHSA)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    write_imdb(tmp_path / "data")
    cfg = compose_cfg(
        *overrides,
        *TINY_MODEL,
        "logger=tensorboard",
        f"data.cache_dir={tmp_path}/cache",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.val_check_interval=1.0",  # once per epoch (the recipes check more often)
    )
    train_in_process(cfg, tmp_path / "run")
    accumulator = EventAccumulator(str(tmp_path / "run" / "tb"), size_guidance={"images": 0})
    accumulator.Reload()
    assert sorted(accumulator.Tags()["images"]) == [f"attention/{view}" for view in views]
    for view in views:
        images = accumulator.Images(f"attention/{view}")
        assert len(images) == 2 and all(image.width > 0 for image in images)  # one per epoch


@pytest.mark.e2e
def test_design_card_command_on_embedded_sample(tmp_path, monkeypatch):
    """`python -m attnexp model=lstm_attn scorer=dot` (no data=, no paths) runs on the embedded
    IMDB sample. In-process: what a new interpreter adds is tested by the subprocess tests."""
    monkeypatch.setenv("ATTNEXP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ATTNEXP_ROOT", str(tmp_path))
    done = run_cli_in_process(
        tmp_path,
        "model=lstm_attn",
        "scorer=dot",
        "trainer.fast_dev_run=true",
        "model.hidden_size=8",
        "model.embed_dim=8",
        "data.max_seq_len=32",
        "trainer.enable_progress_bar=false",
        given_paths=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (record_path,) = Path(tmp_path, "outputs", "runs").glob("*/metrics.json")
    record = json.loads(record_path.read_text())
    assert record["status"] == "completed" and record["data_source"] == "sample"
    assert record["choices"]["data"] == "imdb" and record["choices"]["scorer"] == "dot"
