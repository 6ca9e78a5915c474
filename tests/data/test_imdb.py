import logging
import shutil
from collections import Counter

import pytest
import torch
from imdb_data import write_imdb
from lightning_fabric.utilities.data import _set_sampler_epoch
from tokenizers import Tokenizer, models

from attnexp.data import text_classification
from attnexp.data.batching import collate_tokens
from attnexp.data.imdb import IMDBDataModule
from attnexp.data.sources import sample_path
from attnexp.errors import ConfigError
from attnexp.predictors import predictor_for


def make_dm(tmp_path, **kwargs) -> IMDBDataModule:
    args = {
        "data_dir": str(tmp_path / "data"),
        "cache_dir": str(tmp_path / "cache"),
        "vocab_size": 200,
        "min_frequency": 1,
        "max_seq_len": 20,
        "batch_size": 8,
        "pool_batches": 2,
        **kwargs,
    }
    return IMDBDataModule(**args)


def test_local_parquet_splits_stratified(tmp_path):
    write_imdb(tmp_path / "data", num_train=60, num_test=20)
    dm = make_dm(tmp_path, val_fraction=0.2)
    dm.setup("fit")
    assert dm.source == "local"
    sizes = {s: len(dm.datasets[s]) for s in ("train", "val", "test")}
    assert sizes == {"train": 48, "val": 12, "test": 20}
    # The local file is sorted by label: a contiguous slice would give one label only.
    assert Counter(dm.datasets["val"].labels) == {0: 6, 1: 6}
    assert max(len(ids) for ids in dm.datasets["train"].ids) <= 20
    assert dm.model_kwargs["vocab_size"] == dm.tokenizer.get_vocab_size()
    # The test loader reads the test reviews, not the dev ones (the test metrics would be val's).
    batches = list(dm.test_dataloader())
    assert sum(len(b["labels"]) for b in batches) == 20
    tested = {tuple(row[row != 0].tolist()) for b in batches for row in b["input_ids"]}  # unpadded
    assert tested.isdisjoint(tuple(ids) for ids in dm.datasets["val"].ids)


def test_split_seed_fixes_the_dev_reviews_across_run_seeds(tmp_path):
    write_imdb(tmp_path / "data", num_train=60, num_test=20)

    def dev_texts(**kwargs) -> list[str]:
        dm = make_dm(tmp_path, val_fraction=0.2, **kwargs)
        dm.setup("fit")
        return sorted(dm.tokenizer.decode(list(ids)) for ids in dm.datasets["val"].ids)

    by_seed = {seed: dev_texts(seed=seed) for seed in (0, 1)}
    assert by_seed[0] != by_seed[1]  # null (the default): each run seed its own dev reviews
    assert dev_texts(seed=1, split_seed=0) == by_seed[0]  # a number: the same for every seed


def test_val_split_blocks_and_bad_value(tmp_path):
    import pyarrow.parquet as pq

    from attnexp.data.text import encode_texts

    folder = write_imdb(tmp_path / "data", num_train=60, num_test=20)
    dm = make_dm(tmp_path, val_fraction=0.2, val_split="blocks")
    dm.setup("fit")
    assert Counter(dm.datasets["val"].labels) == {0: 6, 1: 6}
    # Each label's 30 reviews make one run (runs of 250), so the 6 held out of each label are its
    # first 6 in file order: rows 0-5 and 30-35 (held out one by one, they would be scattered).
    texts = pq.read_table(folder / "train.parquet")["text"].to_pylist()
    held = [texts[i] for i in [*range(6), *range(30, 36)]]
    assert [list(ids) for ids in dm.datasets["val"].ids] == encode_texts(dm.tokenizer, held, 20)
    # Runs of 5 (data.val_block=5): each label's 6 held-out reviews are one whole run of 5 and the
    # first review of another run, never 6 scattered reviews.
    dm = make_dm(tmp_path, val_fraction=0.2, val_split="blocks", val_block=5)
    dm.setup("fit")
    row_of = {tuple(ids): i for i, ids in enumerate(encode_texts(dm.tokenizer, texts, 20))}
    assert len(row_of) == len(texts)  # every review encodes differently: rows are identifiable
    held = [row_of[tuple(ids)] for ids in dm.datasets["val"].ids]
    for label_start in (0, 30):
        runs = Counter((r - label_start) // 5 for r in held if label_start <= r < label_start + 30)
        assert sorted(runs.values()) == [1, 5]
        single = next(run for run, n in runs.items() if n == 1)
        assert label_start + 5 * single in held
    assert sorted(held) != [*range(6), *range(30, 36)]  # not the runs of 250's pick (above)
    with pytest.raises(ConfigError, match="data.val_split"):
        make_dm(tmp_path, val_split="movies")
    for bad in (0, -3, 2.5):
        with pytest.raises(ConfigError, match=rf"data.val_block={bad} must be a whole number >= 1"):
            make_dm(tmp_path, val_split="blocks", val_block=bad)
    with pytest.raises(ConfigError, match="data.val_from"):
        make_dm(tmp_path, val_from="dev")


def test_val_from_test_trains_on_all_training_reviews(tmp_path, caplog):
    write_imdb(tmp_path / "data", num_train=60, num_test=40)
    dm = make_dm(tmp_path, val_fraction=0.5, val_from="test")
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    sizes = {s: len(dm.datasets[s]) for s in ("train", "val", "test")}
    assert sizes == {"train": 60, "val": 20, "test": 20}
    assert (
        Counter(dm.datasets["val"].labels) == Counter(dm.datasets["test"].labels) == {0: 10, 1: 10}
    )
    assert "val_from=test" in caplog.text
    assert "takes 20 of the 40 test reviews; the test metrics cover the other 20" in caplog.text


def test_train_fraction_keeps_a_stratified_share_of_the_training_reviews(tmp_path):
    write_imdb(tmp_path / "data", num_train=60, num_test=40)
    dm = make_dm(tmp_path, val_fraction=0.2, train_fraction=0.5)
    dm.setup("fit")
    assert Counter(dm.datasets["train"].labels) == {0: 12, 1: 12}  # half of the 48 left by val
    assert len(dm.datasets["val"]) == 12 and len(dm.datasets["test"]) == 40

    def trained_on(seed: int) -> list:
        dm = make_dm(tmp_path, val_fraction=0.2, train_fraction=0.5, seed=seed, split_seed=7)
        dm.setup("fit")
        return sorted(dm.tokenizer.decode(list(ids)) for ids in dm.datasets["train"].ids)

    # The share is drawn from the split seed, as the dev reviews are: every run seed trains on it.
    assert trained_on(0) == trained_on(1)


@pytest.mark.parametrize("seed", [0, 1])
def test_train_fraction_with_val_from_test_trains_on_a_val_from_train_runs_reviews(tmp_path, seed):
    """0.9 of the training set, drawn from the split seed as val_fraction=0.1 draws the held-out
    reviews: the reviews a default run of the same seed trains on (and so the same tokenizer)."""
    write_imdb(tmp_path / "data", num_train=60, num_test=40)
    default = make_dm(tmp_path, val_fraction=0.1, seed=seed)
    port = make_dm(tmp_path, val_fraction=0.5, val_from="test", train_fraction=0.9, seed=seed)
    for dm in (default, port):
        dm.setup("fit")
    assert len(port.datasets["train"]) == 54
    assert port.tokenizer.get_vocab() == default.tokenizer.get_vocab()
    assert port.datasets["train"].ids == default.datasets["train"].ids


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, True, "half"])
def test_train_fraction_outside_0_1_is_refused(tmp_path, bad):
    with pytest.raises(ConfigError, match=r"data.train_fraction=.* must be a number > 0 and <= 1"):
        make_dm(tmp_path, train_fraction=bad)


def test_train_fraction_that_keeps_nothing_is_refused(tmp_path):
    write_imdb(tmp_path / "data", num_train=20, num_test=10)
    dm = make_dm(tmp_path, val_fraction=0.5, train_fraction=0.01)
    with pytest.raises(
        ConfigError, match=r"data.train_fraction=0.01 of the 10 training reviews keeps none"
    ):
        dm.setup("fit")


def test_acl_folder_layout(tmp_path):
    root = tmp_path / "data" / "imdb" / "aclImdb"
    for split in ("train", "test"):
        for name, text in (("pos", "a great film"), ("neg", "an awful film")):
            (root / split / name).mkdir(parents=True)
            for i in (0, 2, 10, 11, 100):
                (root / split / name / f"{i}_7.txt").write_text(f"{text} {i}")
    dm = make_dm(tmp_path, val_fraction=0.2)
    dm.setup("fit")
    assert dm.source == "local" and len(dm.datasets["test"]) == 10 and len(dm.datasets["val"]) == 2
    # Reviews in id order (as in the parquet copies), not in name order (0, 10, 100, 11, 2).
    texts = dm.load_local(root.parent)["test"]["text"]
    assert [int(t.rsplit(" ", 1)[1]) for t in texts] == [0, 2, 10, 11, 100] * 2


def test_acl_files_that_are_not_reviews_are_left_out(tmp_path, caplog):
    """A README.txt in aclImdb/train/pos was read as a positive review."""
    root = tmp_path / "data" / "imdb" / "aclImdb"
    for split in ("train", "test"):
        for name in ("pos", "neg"):
            (root / split / name).mkdir(parents=True)
            (root / split / name / "0_7.txt").write_text(f"{name} review")
    (root / "train" / "pos" / "README.txt").write_text("notes about the folder")
    with caplog.at_level(logging.WARNING):
        texts = make_dm(tmp_path).load_local(root.parent)["train"]["text"]
    assert texts == ["neg review", "pos review"]
    assert "1 file(s) in" in caplog.text and "not read as reviews: README.txt" in caplog.text
    (root / "test" / "neg" / "0_7.txt").rename(root / "test" / "neg" / "mine.txt")
    with pytest.raises(ConfigError, match=r"no reviews \(<id>_<rating>.txt\) in .*test/neg"):
        make_dm(tmp_path).load_local(root.parent)


def test_acl_folders_straight_under_imdb_and_names_that_are_not_reviews(tmp_path, caplog):
    """train/ and test/ of aclImdb may sit in imdb/ itself; a lone train.parquet does not hide
    them; every name not exactly <id>_<rating>.txt is left out and named (up to three); half a
    copy (no test/pos) is not taken for one."""
    folder = tmp_path / "data" / "imdb"
    for split in ("train", "test"):
        for name in ("pos", "neg"):
            (folder / split / name).mkdir(parents=True)
            (folder / split / name / "0_7.txt").write_text(f"{name} review")
    for stray in ("3_.txt", "1_7.txt.txt", "README.txt"):
        (folder / "train" / "pos" / stray).write_text("not a review")
    (folder / "train.parquet").write_bytes(b"")  # a copy cut short: no test.parquet
    with caplog.at_level(logging.WARNING):
        raw = make_dm(tmp_path).load_local(folder)
    assert raw["train"]["text"] == ["neg review", "pos review"]
    assert "3 file(s) in" in caplog.text
    assert "not read as reviews: 1_7.txt.txt, 3_.txt, README.txt" in caplog.text
    shutil.rmtree(folder / "test" / "pos")
    with pytest.raises(ConfigError, match="holds neither train.parquet .* nor an aclImdb/"):
        make_dm(tmp_path).load_local(folder)


def test_bad_local_folder(tmp_path):
    (tmp_path / "data" / "imdb").mkdir(parents=True)
    with pytest.raises(ConfigError, match="neither train.parquet"):
        make_dm(tmp_path).setup("fit")


def test_embedded_sample_fallback(tmp_path, caplog):
    assert sample_path("imdb_sample.parquet").stat().st_size < 3_000_000
    dm = make_dm(tmp_path, source="sample")
    sample = dm.load_sample()
    assert len(sample["train"]["text"]) == 1600 and len(sample["test"]["text"]) == 400
    assert Counter(sample["test"]["label"]) == {0: 200, 1: 200}
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    assert dm.source == "sample" and "SAMPLE" in caplog.text


def test_bucketed_loader_yields_every_review_once(tmp_path):
    write_imdb(tmp_path / "data", num_train=70, num_test=10)
    dm = make_dm(tmp_path, val_fraction=0.1)
    dm.setup("fit")
    loader = dm.train_dataloader()
    seen = [i for batch in loader.batch_sampler for i in batch]
    assert sorted(seen) == list(range(len(dm.datasets["train"])))
    batches = list(loader)
    assert sum(len(b["labels"]) for b in batches) == len(dm.datasets["train"])
    for b in batches:
        assert b["input_ids"].shape == b["mask"].shape
        assert (b["input_ids"][~b["mask"]] == 0).all()  # padding is [PAD]
        assert b["mask"][:, 0].all()  # no review is all padding


def test_batches_read_in_one_call_equal_single_reads(tmp_path):
    """The loaders fetch a batch through TokenDataset.__getitems__ (one Arrow read): the same
    examples, in the same order, as reading them one by one."""
    write_imdb(tmp_path / "data", num_train=70, num_test=10)
    dm = make_dm(tmp_path, val_fraction=0.1)
    dm.setup("fit")
    dataset, loader = dm.datasets["train"], dm.train_dataloader()
    for indices, batch in zip(loader.batch_sampler, loader, strict=True):
        singles = [dataset[i] for i in indices]
        assert dataset.__getitems__(indices) == singles
        expected = collate_tokens(singles)
        assert all(torch.equal(batch[key], expected[key]) for key in expected)
    dataset.ids = list(dataset.ids)  # as datasets < 4 gives it: a list, not a lazy column
    assert dataset.__getitems__([5, 0, 3]) == [dataset[5], dataset[0], dataset[3]]


def test_token_cache_is_reused(tmp_path, caplog):
    write_imdb(tmp_path / "data")
    make_dm(tmp_path).setup("fit")
    files = sorted(p.name for p in (tmp_path / "cache" / "imdb").iterdir())
    assert (
        any(f.startswith("tokenizer-") for f in files)
        and sum(f.endswith(".arrow") for f in files) >= 3
    )
    with caplog.at_level(logging.INFO):
        dm = make_dm(tmp_path)
        dm.setup("fit")
    assert "tokenizer from cache" in caplog.text and "token ids from cache" in caplog.text
    assert sorted(p.name for p in (tmp_path / "cache" / "imdb").iterdir()) == files
    # Another max_seq_len -> other ids -> another cache file, not a stale hit.
    make_dm(tmp_path, max_seq_len=5).setup("fit")
    assert len(list((tmp_path / "cache" / "imdb").iterdir())) > len(files)


def test_ids_cached_under_another_encoding_rule_are_not_reused(tmp_path, monkeypatch):
    """`ENCODING` names how texts become ids beyond the tokenizer (a typed "[PAD]" reads as [UNK]):
    a new rule must miss the ids cached under the old one."""
    write_imdb(tmp_path / "data")
    make_dm(tmp_path).setup("fit")
    folder = tmp_path / "cache" / "imdb"
    before = {p.name for p in folder.glob("*.arrow")}
    monkeypatch.setattr(text_classification, "ENCODING", "another-rule")
    make_dm(tmp_path).setup("fit")
    assert len({p.name for p in folder.glob("*.arrow")} - before) == 3  # train, val, test


@pytest.mark.parametrize(
    "setting",
    [
        {"truncation": "head_tail"},
        {"vocab_size": 12},
        {"min_frequency": 40},
        {"lowercase": False},
        {"word_split": "whitespace"},
    ],
)
def test_the_cache_never_hands_one_settings_tokenizer_or_ids_to_another(tmp_path, setting):
    """A setting left out of a cache key would train on the tokenizer or the ids of the run
    before it, silently."""
    write_imdb(tmp_path / "data")

    def built(**kwargs) -> tuple:
        dm = make_dm(tmp_path, **kwargs)
        dm.setup("fit")
        return dm.tokenizer.to_str(), list(dm.datasets["train"].ids)

    default = built()  # fills the cache
    fresh = built(cache_dir=str(tmp_path / "empty"), **setting)
    assert fresh != default  # the setting matters to these reviews
    assert built(**setting) == fresh


def test_artifacts_round_trip_and_raw_inputs(tmp_path):
    write_imdb(tmp_path / "data")
    dm = make_dm(tmp_path)
    dm.setup("fit")
    dm.save_artifacts(str(tmp_path / "run"))
    fresh = make_dm(tmp_path)
    fresh.load_artifacts(str(tmp_path / "run"))
    fresh.setup("predict")  # no data needed
    assert fresh.datasets == {} and fresh.model_kwargs == dm.model_kwargs
    assert dm.model_kwargs["max_seq_len"] == 20  # the no-LSTM model's position table
    # a tokenizer the module already holds (data.tokenizer_path) gives way to the run's
    other = make_dm(tmp_path, vocab_size=12)
    other.setup("fit")
    other.load_artifacts(str(tmp_path / "run"))
    assert other.tokenizer.to_str() == dm.tokenizer.to_str()
    batch = predictor_for(fresh).encode_raw([{"text": "A great film"}, {"text": "zzqx " * 50}])
    assert batch["input_ids"].shape == (2, 20) and batch["mask"].sum(1).tolist() == [3, 20]
    assert (
        predictor_for(fresh).check_raw({"text": "  "}) is not None
        and predictor_for(fresh).check_raw({"text": "film"}) is None
    )
    assert any("unknown" in n for n in predictor_for(fresh).raw_notes({"text": "zzqx qqq"}))
    assert any(
        "first 20 of 50" in n for n in predictor_for(fresh).raw_notes({"text": "film " * 50})
    )
    assert (
        predictor_for(fresh).raw_notes({"text": "film " * 20}) == []
    )  # exactly max_seq_len: all read
    tail = make_dm(tmp_path, truncation="head_tail")
    tail.load_artifacts(str(tmp_path / "run"))
    assert predictor_for(tail).encode_raw([{"text": "a " * 30 + "great"}])["input_ids"][
        0, -1
    ] == tail.tokenizer.token_to_id("great")
    assert predictor_for(fresh).prediction_label(1) == "positive"


def test_raw_notes_count_what_the_model_reads(tmp_path):
    """predict's notes describe the max_seq_len tokens read, not the whole text, and name the
    truncation rule; a blank text is called empty; probe_batch takes the first num_examples."""
    write_imdb(tmp_path / "data")
    dm = make_dm(tmp_path)
    dm.setup("fit")
    # unknown words past token 20 are not read; 20 unknown words read are all there is
    assert (
        predictor_for(dm)
        .raw_notes({"text": "film " * 20 + "zzqx"})[0]
        .startswith("long text: only the first")
    )
    assert not any(
        "unknown" in n for n in predictor_for(dm).raw_notes({"text": "film " * 20 + "zzqx"})
    )
    assert (
        "every word is unknown" in predictor_for(dm).raw_notes({"text": "zzqx " * 20 + "film"})[1]
    )
    tail = make_dm(tmp_path, truncation="head_tail")
    tail.setup("fit")
    (note,) = predictor_for(tail).raw_notes({"text": "film " * 50})
    assert "only the first and last 20 of 50 tokens" in note and "truncation=head_tail" in note
    assert predictor_for(dm).check_raw({"text": " \t "}) == "empty text: nothing to classify"
    probes = dm.probe_batch(2)
    assert probes["input_ids"].shape[0] == 2 and probes["labels"].tolist() == [1, 0]


def test_a_resumed_run_never_replaces_its_tokenizer(tmp_path):
    """A resumed run that built another tokenizer (other training texts: seed=null drew a new
    split, or paths.data_dir now holds other data) must not write over the run's tokenizer.json:
    its checkpoint's ids mean that tokenizer's words."""
    write_imdb(tmp_path / "data")
    run = tmp_path / "run"
    first = make_dm(tmp_path, seed=0)
    first.setup("fit")
    first.save_artifacts(str(run))
    saved = (run / "tokenizer.json").read_bytes()
    again = make_dm(tmp_path, seed=0)  # the same run resumed: the same tokenizer, kept
    again.setup("fit")
    again.save_artifacts(str(run))
    write_imdb(tmp_path / "other", seed=1)
    other = make_dm(tmp_path, data_dir=str(tmp_path / "other"))
    other.setup("fit")
    assert other.tokenizer.to_str() != first.tokenizer.to_str()
    with pytest.raises(ConfigError, match=r"tokenizer.json holds the tokenizer this run was"):
        other.save_artifacts(str(run))
    assert (run / "tokenizer.json").read_bytes() == saved


def test_probe_figures_per_head(tmp_path):
    write_imdb(tmp_path / "data")
    dm = make_dm(tmp_path)
    dm.setup("fit")
    batch = dm.probe_batch(3)
    B, T = batch["input_ids"].shape
    logits = torch.zeros(B, 2)
    pooled = predictor_for(dm).attention_figure(batch, logits, torch.softmax(torch.randn(B, T), -1))
    assert list(pooled) == ["attention/pooling"]
    heads = predictor_for(dm).attention_figure(
        batch, logits, torch.softmax(torch.randn(B, 4, T, T), -1)
    )
    assert list(heads) == [f"attention/head{h}" for h in range(4)]
    assert predictor_for(dm).attention_figure(batch, logits, None) is None


def test_loader_batch_order_is_pinned(tmp_path):
    """A seed's batches are part of its results: this order must not change unnoticed."""
    write_imdb(tmp_path / "data", num_train=42, num_test=12)
    # 6 of each label's 21 reviews held out (what 0.3 gave before the labels' shares had to add
    # up to the total: 0.3 now holds out 13)
    dm = make_dm(tmp_path, batch_size=4, val_fraction=6 / 21, seed=3)
    dm.setup("fit")
    assert list(dm.train_dataloader().batch_sampler) == [
        [26, 7, 2, 1],
        [11, 17, 13, 18],
        [3, 23, 9, 5],
        [21, 22],
        [27, 19, 24, 0],
        [14, 20, 29, 12],
        [15, 28, 8, 25],
        [10, 16, 4, 6],
    ]
    assert list(dm.val_dataloader().batch_sampler) == [[2, 6, 1, 7], [4, 5, 0, 3], [8, 11, 9, 10]]


def test_each_epoch_gets_new_batches(tmp_path):
    write_imdb(tmp_path / "data", num_train=42, num_test=12)
    dm = make_dm(tmp_path, batch_size=4, val_fraction=0.3, seed=3)
    dm.setup("fit")
    loader = dm.train_dataloader()
    epoch0 = list(loader.batch_sampler)
    _set_sampler_epoch(loader, 1)  # what Lightning's fit loop calls at each epoch's start
    epoch1 = list(loader.batch_sampler)
    assert epoch1 != epoch0
    assert sorted(i for b in epoch1 for i in b) == sorted(i for b in epoch0 for i in b)


def test_a_split_that_leaves_a_side_empty_is_refused(tmp_path):
    write_imdb(tmp_path / "data", num_train=8, num_test=4)
    with pytest.raises(
        ConfigError, match=r"data.val_fraction=0.01 of the 8 train reviews leaves 0"
    ):
        make_dm(tmp_path, val_fraction=0.01).setup("fit")
    with pytest.raises(
        ConfigError, match=r"0.9 of the 4 test reviews leaves 4 for validation and 0 for test"
    ):
        make_dm(tmp_path, val_fraction=0.9, val_from="test").setup("fit")


def write_parquet(folder, split, texts, labels):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": texts, "label": labels}), folder / f"{split}.parquet")


@pytest.mark.parametrize(
    "texts,labels,match",
    [
        (["good", "bad"], [1, 2], r"train.parquet row 1: label must be 0 \(negative\) or 1"),
        (["good", None], [1, 0], r"train.parquet row 1: the text is None, not a string"),
        # floats or booleans would pass `in (0, 1)` and end in a loss-function traceback
        (["good", "bad"] * 10, [1.0, 0.0] * 10, r"row 0: .* as an integer, found 1.0"),
        (["good", "bad"] * 10, [True, False] * 10, r"row 0: .* as an integer, found True"),
    ],
)
def test_bad_parquet_rows_name_file_and_row(tmp_path, texts, labels, match):
    folder = tmp_path / "data" / "imdb"
    write_parquet(folder, "train", texts, labels)
    write_parquet(folder, "test", ["fine", "awful"], [1, 0])
    with pytest.raises(ConfigError, match=match):
        make_dm(tmp_path).setup("fit")


@pytest.mark.parametrize("empty", ["train", "test"])
def test_an_empty_parquet_file_is_named(tmp_path, empty):
    folder = tmp_path / "data" / "imdb"
    for split in ("train", "test"):
        rows = ([], []) if split == empty else (["good", "bad"] * 10, [1, 0] * 10)
        write_parquet(folder, split, *rows)
    with pytest.raises(ConfigError, match=rf"{empty}.parquet holds no reviews"):
        make_dm(tmp_path).setup("fit")


def test_empty_reviews_are_scored_and_said(tmp_path):
    """A test split of empty reviews was scored without a word said."""
    folder = tmp_path / "data" / "imdb"
    write_parquet(folder, "train", ["good", "bad"] * 10, [1, 0] * 10)
    write_parquet(folder, "test", ["", " ", "good", "bad"], [1, 0, 1, 0])
    dm = make_dm(tmp_path, val_fraction=0.1)
    dm.setup("fit")
    assert dm.notes == ["2 of the 4 test reviews are empty"]


def test_relabelled_reviews_change_their_splits_fingerprint(tmp_path):
    """The same texts under other labels are other data: evaluate and a resume must be able to
    tell that the test set they read is not the one the run scored."""
    folder = tmp_path / "data" / "imdb"
    write_parquet(folder, "train", ["good", "bad"] * 10, [1, 0] * 10)
    prints = []
    for labels in ([1, 0], [0, 1]):
        write_parquet(folder, "test", ["good", "bad"], labels)
        dm = make_dm(tmp_path, val_fraction=0.1)
        dm.setup("fit")
        prints.append(dm.fingerprints)
    assert prints[0]["test"] != prints[1]["test"] and prints[0]["train"] == prints[1]["train"]


def test_acl_review_not_utf8(tmp_path):
    root = tmp_path / "data" / "imdb" / "aclImdb"
    for split in ("train", "test"):
        for name in ("pos", "neg"):
            (root / split / name).mkdir(parents=True)
            (root / split / name / "0_7.txt").write_text("fine")
    (root / "train" / "neg" / "1_2.txt").write_bytes("caf\xe9 awful".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"1_2.txt is not UTF-8 text .*IMDB reviews must be"):
        make_dm(tmp_path).setup("fit")


def test_a_broken_cached_tokenizer_is_trained_again(tmp_path, caplog):
    write_imdb(tmp_path / "data")
    make_dm(tmp_path).setup("fit")
    (cached,) = (tmp_path / "cache" / "imdb").glob("tokenizer-*.json")
    good = cached.read_text()
    cached.write_text(good[:100])  # as a run killed while writing would have left it
    with caplog.at_level(logging.WARNING):
        make_dm(tmp_path).setup("fit")
    assert "the cached one is broken" in caplog.text and cached.read_text() == good
    assert not list(cached.parent.glob("*.tmp*"))  # written whole, then moved into place


def test_a_tokenizer_with_other_special_ids_is_refused(tmp_path):
    """data.tokenizer_path from elsewhere: padding and masks rely on [PAD] = 0 and [UNK] = 1."""
    path = tmp_path / "tokenizer.json"
    Tokenizer(models.WordLevel({"good": 0, "[UNK]": 1, "[PAD]": 2}, unk_token="[UNK]")).save(
        str(path)
    )
    with pytest.raises(ConfigError, match=r"must map \[PAD\] to id 0 .* found \{'\[PAD\]': 2"):
        make_dm(tmp_path, tokenizer_path=str(path))
    # [PAD] right is not enough: [UNK] must be id 1 too
    Tokenizer(models.WordLevel({"[PAD]": 0, "good": 1, "[UNK]": 2}, unk_token="[UNK]")).save(
        str(path)
    )
    with pytest.raises(ConfigError, match=r"found \{'\[PAD\]': 0, '\[UNK\]': 2\} \(set data.tok"):
        make_dm(tmp_path, tokenizer_path=str(path))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        # after loading and splitting the data: TypeError from the tokenizer's size check
        ({"vocab_size": "abc"}, r"data.vocab_size='abc' must be a whole number >= 1"),
        ({"val_fraction": "abc"}, r"data.val_fraction='abc' must be a number > 0 and < 1"),
        ({"num_workers": -1}, r"data.num_workers=-1 must be a whole number >= 0"),
        ({"split_seed": -1}, r"data.split_seed=-1 must be a whole number from 0 to 4294967295"),
    ],
)
def test_wrong_types_and_counts_are_refused_before_loading(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_dm(tmp_path, **kwargs)


def test_a_cache_dir_that_is_a_file_is_refused(tmp_path):
    """It ended in NotADirectoryError when the tokenizer was written, after loading the data."""
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match=r"data.cache_dir=.*afile/sub: .*afile is a file"):
        make_dm(tmp_path, cache_dir=str(tmp_path / "afile" / "sub"))


@pytest.mark.parametrize(
    "texts,labels,match",
    [
        # each trained without a warning: accuracy 1.0 on one class, or a model of padding only
        (["good", "fine"] * 10, [1, 1] * 10, r"all 18 training reviews have label 1 \(positive\)"),
        (["", "  "] * 10, [1, 0] * 10, r"all 18 training reviews are empty or whitespace"),
    ],
)
def test_a_training_split_that_teaches_nothing_is_refused(tmp_path, texts, labels, match):
    folder = tmp_path / "data" / "imdb"
    write_parquet(folder, "train", texts, labels)
    write_parquet(folder, "test", ["fine", "awful"], [1, 0])
    with pytest.raises(ConfigError, match=match + r".*check the .* of the local data in "):
        make_dm(tmp_path).setup("fit")
