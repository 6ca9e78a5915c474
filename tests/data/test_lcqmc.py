import logging
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from lcqmc_data import write_lcqmc

from attnexp.data.chinese import PairTokenizer
from attnexp.data.lcqmc import LCQMCDataModule, read_pairs
from attnexp.errors import ConfigError
from attnexp.predictors import predictor_for


def test_char_level_tokenization():
    tok = PairTokenizer.from_texts(["电脑怎么录像", "iPhone6 好用吗？"])
    # each CJK char one token; ASCII words/numbers whole, lower-cased; full-width ？ -> ?
    assert tok.tokenize("电脑iPhone6好 用？") == ["电", "脑", "iphone6", "好", "用", "?"]
    assert tok.tokenize("火星") == ["[UNK]", "[UNK]"]
    assert [tok.tokenizer.id_to_token(i) for i in range(4)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    rare = PairTokenizer.from_texts(["电电脑"], min_frequency=2)  # data.min_frequency
    assert rare.tokenize("电脑") == ["电", "[UNK]"]


def test_pair_encoding_segments_and_truncation():
    tok = PairTokenizer.from_texts(["电脑录像视频"])
    ids, segments = tok.encode_pairs(["电脑"], ["录像视频"], max_seq_len=32)
    assert tok.ids_to_tokens(ids[0]) == [
        "[CLS]",
        "电",
        "脑",
        "[SEP]",
        "录",
        "像",
        "视",
        "频",
        "[SEP]",
    ]
    assert segments[0] == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    ids, segments = tok.encode_pairs(["电脑"], ["录像视频"], max_seq_len=7)  # longest first
    assert tok.ids_to_tokens(ids[0]) == ["[CLS]", "电", "脑", "[SEP]", "录", "像", "[SEP]"]
    ids, _ = tok.encode_pairs([""], [""], max_seq_len=7)
    assert tok.ids_to_tokens(ids[0]) == ["[CLS]", "[SEP]", "[SEP]"]
    ids, _ = tok.encode_pairs(["电脑"], ["录像视频"], max_seq_len=5)  # the shortest: a token each
    assert tok.ids_to_tokens(ids[0]) == ["[CLS]", "电", "[SEP]", "录", "[SEP]"]
    with pytest.raises(ConfigError, match=r"data.max_seq_len=4 leaves no room .* \(set >= 5\)"):
        tok.encode_pairs(["电脑"], ["录像视频"], max_seq_len=4)
    # the cut is for that call only: predict's notes count every token of a text
    assert len(tok.tokenize("电脑录像视频")) == 6


def test_vocab_file(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n电\n脑\n", encoding="utf-8")
    tok = PairTokenizer.from_vocab_file(vocab)
    ids, _ = tok.encode_pairs(["电脑"], ["脑x"], 16)
    assert ids[0] == [2, 4, 5, 3, 5, 1, 3]
    vocab.write_text("[PAD]\n电\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"lacks the special tokens .*point data.vocab_file"):
        PairTokenizer.from_vocab_file(vocab)
    with pytest.raises(ConfigError, match=r"nowhere.txt does not exist \(set data.vocab_file="):
        PairTokenizer.from_vocab_file(tmp_path / "nowhere.txt")
    for text, problem in (
        ("[PAD]\n\n电\n", ":2 holds a blank line"),
        ("电\n脑\n电\n", ":3 holds '电' again"),
    ):
        vocab.write_text(text, encoding="utf-8")  # ids are line numbers: no gaps, no repeats
        with pytest.raises(ConfigError, match=problem):
            PairTokenizer.from_vocab_file(vocab)


def test_typed_special_tokens_are_plain_text(tmp_path):
    tok = PairTokenizer.from_texts(["电脑[录像]", "sep cls pad unk"])
    ids, _ = tok.encode_pairs(["电[SEP][CLS]"], ["脑[PAD][UNK]"], 32)
    assert tok.ids_to_tokens(ids[0]) == (
        ["[CLS]", "电", "[", "sep", "]", "[", "cls", "]", "[SEP]"]
        + ["脑", "[", "pad", "]", "[", "unk", "]", "[SEP]"]
    )
    tok.save(tmp_path / "tokenizer.json")  # a saved tokenizer reloads with the same behaviour
    again = PairTokenizer.load(tmp_path / "tokenizer.json")
    assert again.encode_pairs(["电[SEP][CLS]"], ["脑[PAD][UNK]"], 32)[0] == ids
    assert again.fingerprint() == tok.fingerprint()  # encoding caches keep their keys
    # ...and a cache made before the rule (typed "[SEP]" read as the special id) is not reused:
    # `to_str()` is the same either way, so the fingerprint names the rule itself
    again.tokenizer.encode_special_tokens = False
    assert again.tokenizer.to_str() == tok.tokenizer.to_str()
    assert again.fingerprint() != tok.fingerprint()


def test_non_utf8_file_names_file_and_encoding(tmp_path):
    folder = write_lcqmc(tmp_path / "data", {"dev": 20, "test": 5})
    text = (folder / "dev.tsv").read_text(encoding="utf-8")
    (folder / "dev.tsv").write_bytes(text.encode("gbk"))
    with pytest.raises(ConfigError, match=r"dev.tsv is not UTF-8 .*must be UTF-8"):
        make_dm(tmp_path).setup()


def pair_segments(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The segment ids a batch must carry: 1 after the first [SEP] (id 3), on real tokens only."""
    sep = (batch["input_ids"] == 3).long()
    after_first_sep = (sep.cumsum(dim=1) - sep) >= 1
    return (after_first_sep & batch["mask"]).long()


def make_dm(tmp_path, **kwargs) -> LCQMCDataModule:
    kwargs = {"train_split": "dev", "batch_size": 8, "cache_dir": str(tmp_path / "cache"), **kwargs}
    return LCQMCDataModule(str(tmp_path / "data"), **kwargs)


def make_encoded(tmp_path):
    """The training split encoded without a cache."""
    dm = make_dm(tmp_path, cache_dir=None)
    dm.setup()
    return dm.datasets["train"]


def test_reduced_protocol_split_is_fixed(tmp_path):
    write_lcqmc(tmp_path / "data", {"dev": 100, "test": 30})
    dm = make_dm(tmp_path, seed=1)
    dm.setup()
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 90, "val": 10, "test": 30}
    other = make_dm(tmp_path, seed=2)  # another run seed: the same validation pairs
    other.setup()
    assert other.texts["val"] == dm.texts["val"]
    assert dm.source == "local"
    # the validation pairs are held out of training, and the two sides together are the dev file
    pairs = {side: list(zip(*dm.texts[side], strict=True)) for side in ("train", "val")}
    assert set(pairs["train"]).isdisjoint(pairs["val"])
    dev = (tmp_path / "data" / "lcqmc" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    fields = [line.split("\t") for line in dev]
    assert sorted(pairs["train"] + pairs["val"]) == sorted((a, b, int(y)) for a, b, y in fields)
    assert dm.model_kwargs == {
        "num_classes": 2,
        "vocab_size": dm.tokenizer.vocab_size,
        "pad_id": 0,
        "unk_id": 1,
        "max_seq_len": 128,
    }


@pytest.mark.parametrize(("dev", "val_fraction"), [(1, 0.1), (10, 0.99)])
def test_a_dev_split_that_leaves_no_training_pairs_is_refused(tmp_path, dev, val_fraction):
    write_lcqmc(tmp_path / "data", {"dev": dev, "test": 4})
    with pytest.raises(ConfigError, match=rf"data.val_fraction={val_fraction} of the {dev} dev"):
        make_dm(tmp_path, val_fraction=val_fraction).setup()


def test_standard_protocol_txt_names_and_header(tmp_path):
    folder = write_lcqmc(tmp_path / "data", {"train": 40, "dev": 20, "test": 10}, suffix=".txt")
    (folder / "test.txt").write_text("text_a\ttext_b\tlabel\n电脑\t录像\t1\n", encoding="utf-8")
    with open(folder / "train.txt", "a", encoding="utf-8") as handle:
        handle.write("电脑\t火星\t0\n")  # characters only a text_b has
    dm = make_dm(tmp_path, train_split="train")
    dm.setup()
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 41, "val": 20, "test": 1}
    assert "[UNK]" not in dm.tokenizer.tokenize("火星")  # the vocabulary reads both sides


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("电脑\t录像\n", r"dev.tsv:3: expected 3 tab-separated columns"),
        ("电脑\t录像\t2\n", r"dev.tsv:3: label must be 0 or 1, found '2'"),
        ("电脑\t录像\tlabel\n", r"dev.tsv:3: label must be 0 or 1"),  # a header on line 1 only
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, match):
    folder = write_lcqmc(tmp_path / "data", {"dev": 20, "test": 5})
    rows = (folder / "dev.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "dev.tsv").write_text("".join(rows[:2]) + line + "".join(rows[2:]), encoding="utf-8")
    with pytest.raises(ConfigError, match=match):
        make_dm(tmp_path).setup()


def test_lines_of_spaces_are_skipped_as_blank_lines(tmp_path):
    """A line of spaces left at a file's end or between pairs is no malformed pair."""
    path = tmp_path / "dev.tsv"
    path.write_bytes("电脑\t录像\t1\r\n   \r\n\n录像\t电脑\t0\n  \n".encode())
    assert read_pairs(path) == (["电脑", "录像"], ["录像", "电脑"], [1, 0])


def test_the_log_counts_the_pairs_cut_at_max_seq_len(tmp_path, caplog):
    """Each side holds 3 characters or more: at max_seq_len=5 every pair is cut, so the count of
    pairs at the limit is the count of pairs."""
    write_lcqmc(tmp_path / "data")
    dm = make_dm(tmp_path, max_seq_len=5)
    with caplog.at_level(logging.INFO):
        dm.setup()
    counts = {name: len(d) for name, d in dm.datasets.items()}
    assert f"pairs at max_seq_len=5 (cut there, or exactly that long): {counts}" in caplog.text


def test_missing_data_says_where_to_put_files(tmp_path):
    with pytest.raises(ConfigError, match=r"lcqmc.*does not exist.*Put dev.tsv, test.tsv"):
        make_dm(tmp_path).setup()
    write_lcqmc(tmp_path / "data")
    with pytest.raises(ConfigError, match=r"no train.tsv in .*data.train_split=dev"):
        make_dm(tmp_path, train_split="train").setup()
    with pytest.raises(ConfigError, match="data.train_split='all' must be 'train' or 'dev'"):
        make_dm(tmp_path, train_split="all")


def test_batches_cache_and_artifacts(tmp_path):
    write_lcqmc(tmp_path / "data")
    dm = make_dm(tmp_path)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"input_ids", "segment_ids", "mask", "labels"}
    assert batch["input_ids"].shape == batch["mask"].shape == batch["segment_ids"].shape
    assert torch.all(batch["input_ids"][~batch["mask"]] == 0) and torch.all(
        batch["input_ids"][:, 0] == 2
    )
    assert torch.equal(batch["segment_ids"], pair_segments(batch))  # a [SEP] b [SEP] -> 0 0 1 1
    assert batch["segment_ids"].sum() > 0
    assert len(list((tmp_path / "cache" / "lcqmc").glob("*.pt"))) == 3
    assert len(dm.test_dataloader()) == 1  # the 40 test pairs in one batch of eval_batch_size
    again = make_dm(tmp_path)
    again.setup()  # from the cache: the same encodings
    for field in ("ids", "segments"):
        read, made = getattr(again.datasets["test"], field), getattr(dm.datasets["test"], field)
        assert all(torch.equal(a, b) for a, b in zip(read, made, strict=True))

    # every pair is a view of one ids and one segments storage, encoded or read from the cache:
    # ddp_spawn pickled a fresh encoding to its workers with a file descriptor per pair's tensor
    # ("Too many open files" on the 8.8k dev pairs)
    for dataset in (dm.datasets["train"], again.datasets["train"], make_encoded(tmp_path)):
        for tensors in (dataset.ids, dataset.segments):
            assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1

    dm.save_artifacts(str(tmp_path))
    loaded = make_dm(tmp_path / "elsewhere")  # no data there: predict needs only the tokenizer
    loaded.load_artifacts(str(tmp_path))
    loaded.setup("predict")
    assert loaded.model_kwargs["vocab_size"] == dm.tokenizer.vocab_size


def test_a_resumed_run_never_replaces_its_tokenizer(tmp_path):
    """A resumed run whose data built another vocabulary must not write over tokenizer.json."""
    write_lcqmc(tmp_path / "data")
    dm = make_dm(tmp_path)
    dm.setup()
    dm.save_artifacts(str(tmp_path / "run"))
    saved = (tmp_path / "run" / "tokenizer.json").read_bytes()
    dm.save_artifacts(str(tmp_path / "run"))  # the same tokenizer again: kept
    write_lcqmc(tmp_path / "other" / "data", seed=1)
    other = make_dm(tmp_path / "other")
    other.setup()
    with pytest.raises(ConfigError, match=r"tokenizer.json holds the tokenizer this run was"):
        other.save_artifacts(str(tmp_path / "run"))
    assert (tmp_path / "run" / "tokenizer.json").read_bytes() == saved


def test_raw_inputs_for_predict(tmp_path, monkeypatch):
    write_lcqmc(tmp_path / "data")
    dm = make_dm(tmp_path, max_seq_len=12)
    dm.setup()
    assert predictor_for(dm).raw_fields == ("text_a", "text_b")
    assert "text_a is empty" in predictor_for(dm).check_raw({"text_a": " ", "text_b": "电脑"})
    assert predictor_for(dm).check_raw({"text_a": "电脑", "text_b": "录像"}) is None
    notes = predictor_for(dm).raw_notes({"text_a": "电脑" * 10, "text_b": "火星"})
    assert any("truncated to data.max_seq_len=12" in n for n in notes) and any(
        "[UNK]" in n for n in notes
    )
    # unknown words in the part cut off are not read: not counted (they were, as 2 of 22)
    notes = predictor_for(dm).raw_notes({"text_a": "电脑" * 10 + "火星", "text_b": "录像"})
    assert len(notes) == 1 and "truncated to data.max_seq_len=12" in notes[0]
    # [CLS] a [SEP] b [SEP]: 9 characters fit in 12 tokens, 10 do not
    assert predictor_for(dm).raw_notes({"text_a": "电脑电脑电", "text_b": "电脑电脑"}) == []
    notes = predictor_for(dm).raw_notes({"text_a": "电脑电脑电", "text_b": "电脑电脑电"})
    assert len(notes) == 1 and notes[0].startswith("13 tokens with [CLS]/[SEP]: truncated to")
    notes = predictor_for(dm).raw_notes({"text_a": "电脑", "text_b": "火星"})
    assert notes == ["2 of the 4 tokens read are not in the training vocabulary ([UNK])"]
    batch = predictor_for(dm).encode_raw(
        [{"text_a": "电脑" * 10, "text_b": "录像"}, {"text_a": "电", "text_b": "脑"}]
    )
    assert batch["input_ids"].shape == (2, 12) and batch["mask"].sum(1).tolist() == [12, 5]
    assert torch.equal(batch["segment_ids"], pair_segments(batch))
    assert (
        predictor_for(dm).prediction_label(1) == "similar"
        and predictor_for(dm).prediction_label(0) == "not similar"
    )
    attention = [torch.softmax(torch.randn(2, 2, 12, 12), -1)]
    monkeypatch.chdir(tmp_path)
    views = predictor_for(dm).prediction_attention(batch, attention)
    probs = torch.tensor([[0.3, 0.7], [0.6, 0.4]])
    files = predictor_for(dm).prediction_figures(
        batch, probs, attention, views, [tmp_path / "ex0", None]
    )
    assert [f.name for f in files] == ["ex0.png", "ex0.html"]
    assert all(f.stat().st_size > 0 for f in files) and not list(tmp_path.glob("None*"))
    assert "layer 1 head 2" in (tmp_path / "ex0.html").read_text(encoding="utf-8")


def test_probe_batch_of_only_short_pairs_takes_the_shortest(tmp_path):
    """No validation pair reaches 8 tokens: the probes are the shortest ones, not an empty batch."""
    folder = tmp_path / "data" / "lcqmc"
    folder.mkdir(parents=True)
    for split in ("dev", "test"):
        (folder / f"{split}.tsv").write_text("好\t好\t1\n买\t卖\t0\n" * 20, encoding="utf-8")
    dm = make_dm(tmp_path)
    dm.setup()
    batch = dm.probe_batch(4)
    assert batch["input_ids"].shape == (4, 5) and batch["mask"].all()


def test_probe_batch_and_attention_figures(tmp_path):
    folder = write_lcqmc(tmp_path / "data")
    with open(folder / "dev.tsv", "a", encoding="utf-8") as f:  # pairs too short to read
        f.write("好\t好\t1\n买\t卖\t0\n" * 20)
    dm = make_dm(tmp_path)
    dm.setup()
    batch = dm.probe_batch(4)
    assert batch["labels"].tolist() == [1, 0, 1, 0]
    # the shortest validation pairs of each label that are at least 8 tokens long
    val, lengths = dm.datasets["val"], batch["mask"].sum(1)
    assert (val.lengths < 8).any()  # there are shorter ones to leave out
    for y in (0, 1):
        eligible = sorted(val.lengths[(val.labels == y) & (val.lengths >= 8)].tolist())
        assert sorted(lengths[batch["labels"] == y].tolist()) == eligible[:2]
    T = batch["input_ids"].shape[1]
    attention = [torch.softmax(torch.randn(4, 2, T, T), -1) for _ in range(2)]
    logits = torch.tensor([[0.0, 1.0], [2.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    figures = predictor_for(dm).attention_figure(batch, logits, attention)
    assert list(figures) == ["attention/pair0", "attention/pair1"]
    assert len(figures["attention/pair0"].axes) == 4  # 2 layers x 2 heads
    titles = [figures[f"attention/pair{b}"]._suptitle.get_text() for b in (0, 1)]
    assert titles == ["p(similar)=0.73, label=similar", "p(similar)=0.12, label=not similar"]
    one = {key: value[:1] for key, value in batch.items()}  # fewer examples than figures
    figures = predictor_for(dm).attention_figure(one, torch.randn(1, 2), [a[:1] for a in attention])
    assert list(figures) == ["attention/pair0"]


def test_loader_batch_order_is_pinned(tmp_path):
    """The recorded LCQMC runs depend on this exact batch order for a seed: keep it."""
    write_lcqmc(tmp_path / "data", {"dev": 60, "test": 12})
    dm = make_dm(tmp_path, batch_size=4, eval_batch_size=4, seed=3)
    dm.setup("fit")
    assert list(dm.train_dataloader().batch_sampler) == [
        [6, 47, 50, 48],
        [41, 53, 13, 30],
        [10, 32, 31, 22],
        [52, 34, 12, 24],
        [40, 29, 28, 0],
        [17, 39, 18, 2],
        [23, 3, 36, 49],
        [14, 20, 51, 42],
        [7, 5],
        [35, 46, 16, 38],
        [25, 8, 45, 27],
        [26, 1, 37, 43],
        [33, 11, 9, 44],
        [4, 15, 21, 19],
    ]
    assert list(dm.val_dataloader().batch_sampler) == [[1, 2, 3, 0], [4, 5]]


def test_missing_or_broken_tokenizer_file(tmp_path):
    write_lcqmc(tmp_path / "data", {"dev": 20, "test": 6})
    missing = tmp_path / "missing.json"
    with pytest.raises(ConfigError, match=r"no tokenizer at .*missing.json.*data.tokenizer_path="):
        make_dm(tmp_path, tokenizer_path=str(missing)).setup("fit")
    missing.write_text('{"version": "1.0", "trunc')
    with pytest.raises(ConfigError, match=r"not a valid tokenizer file .*data.tokenizer_path="):
        make_dm(tmp_path, tokenizer_path=str(missing)).setup("fit")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"max_seq_len": "abc"},
            r"data.max_seq_len='abc' must be a whole number >= 1",
        ),  # TypeError
        ({"val_fraction": "abc"}, r"data.val_fraction='abc' must be a number > 0 and < 1"),
        ({"num_workers": -1}, r"data.num_workers=-1 must be a whole number >= 0"),
        ({"min_frequency": 0}, r"data.min_frequency=0 must be a whole number >= 1"),
        ({"eval_batch_size": 0}, r"data.eval_batch_size=0 must be a whole number >= 1"),
        ({"source": "sample"}, r"data.source=sample: LCQMC has no embedded sample"),
    ],
)
def test_wrong_types_and_counts_are_refused(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_dm(tmp_path, **kwargs)


def test_a_cache_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match=r"data.cache_dir=.*afile: .*afile is a file"):
        make_dm(tmp_path, cache_dir=str(tmp_path / "afile"))


def test_a_broken_cached_encoding_is_encoded_again(tmp_path, caplog):
    """A cut-short cache file stopped setup with torch's zip-archive RuntimeError."""
    write_lcqmc(tmp_path / "data")
    make_dm(tmp_path).setup()
    for cached in (tmp_path / "cache" / "lcqmc").glob("*.pt"):
        cached.write_bytes(cached.read_bytes()[:100])
    with caplog.at_level("WARNING"):
        dm = make_dm(tmp_path)
        dm.setup()
    assert "is broken" in caplog.text and len(dm.datasets["test"]) == 40
    again = make_dm(tmp_path)  # the broken files were replaced by good ones
    again.setup()
    for field in ("ids", "segments"):
        read, made = getattr(again.datasets["test"], field), getattr(dm.datasets["test"], field)
        assert all(torch.equal(a, b) for a, b in zip(read, made, strict=True))


def test_a_training_split_of_one_class_is_refused(tmp_path):
    folder = write_lcqmc(tmp_path / "data", {"dev": 40, "test": 10})
    lines = (folder / "dev.tsv").read_text(encoding="utf-8").splitlines()
    one_class = [line.rsplit("\t", 1)[0] + "\t1" for line in lines]  # trained silently before
    (folder / "dev.tsv").write_text("\n".join(one_class) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"all 36 training pairs have label \[1\]: a matcher"):
        make_dm(tmp_path).setup()


def test_the_cache_lies_under_attnexp_cache_as_imdbs_does(compose_cfg, monkeypatch):
    """data.cache_dir means what it means for IMDB: null is $ATTNEXP_CACHE, else ~/.cache/attnexp,
    and the dataset caches in its own folder under it."""
    monkeypatch.setenv("ATTNEXP_CACHE", "/elsewhere/cache")
    assert compose_cfg("model=transformer").data.cache_dir is None
    assert instantiate(compose_cfg("model=transformer").data).cache_folder == Path(
        "/elsewhere/cache/lcqmc"
    )
    monkeypatch.delenv("ATTNEXP_CACHE")
    dm = instantiate(compose_cfg("model=transformer").data)
    assert dm.cache_folder == Path("~/.cache/attnexp/lcqmc").expanduser()
    imdb = instantiate(compose_cfg("model=lstm_mean").data)
    assert imdb.cache_folder == Path("~/.cache/attnexp/imdb").expanduser()


def test_pair_files_with_a_bom_crlf_and_a_lone_carriage_return(tmp_path):
    """A lone \\r inside a text ended the line: "expected 3 ... columns, found 1"."""
    path = tmp_path / "dev.tsv"
    path.write_bytes(  # a blank line is skipped, not "found 1" column
        "\ufefftext_a\ttext_b\tlabel\r\n你好\t您好\t1\r\n\r\n电脑\r坏了\t电脑坏\t0\r\n".encode()
    )
    texts_a, texts_b, labels = read_pairs(path)
    assert texts_a == ["你好", "电脑\r坏了"] and texts_b == ["您好", "电脑坏"] and labels == [1, 0]


def test_pairs_with_an_empty_side_are_said(tmp_path):
    folder = write_lcqmc(tmp_path / "data", {"dev": 40, "test": 10})
    lines = (folder / "test.tsv").read_text(encoding="utf-8").splitlines()
    lines[0] = "\t" + lines[0].split("\t", 1)[1]  # text_a of the first pair empty
    (folder / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    dm = make_dm(tmp_path)
    dm.setup("fit")
    assert dm.notes == ["1 of the 10 test pairs have an empty side"]


def test_a_cached_encoding_is_reused_for_the_same_texts_and_length_only(tmp_path):
    """A cache hit on other settings would train on pairs cut at another max_seq_len, or on the
    encodings of text_b sides edited since."""
    folder = write_lcqmc(tmp_path / "data", {"dev": 20, "test": 6})
    make_dm(tmp_path).setup()
    short = make_dm(tmp_path, max_seq_len=6)
    short.setup()
    assert int(short.datasets["test"].lengths.max()) == 6
    lines = (folder / "test.tsv").read_text(encoding="utf-8").splitlines()
    a, _, label = lines[0].split("\t")
    lines[0] = f"{a}\t电脑电脑电脑电脑\t{label}"  # text_b only
    (folder / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    edited = make_dm(tmp_path)
    edited.setup()
    assert edited.tokenizer.ids_to_tokens(edited.datasets["test"].ids[0])[-9:] == [
        *"电脑电脑电脑电脑",
        "[SEP]",
    ]
