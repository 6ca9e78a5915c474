"""fra-eng and Multi30k DataModules: the split by source, references, tokenizers, batches."""

import gzip

import pytest
import torch
from translation_data import write_fra_eng, write_multi30k

from attnexp.data.fra_eng import FraEngDataModule, read_fra, split_by_source
from attnexp.data.multi30k import Multi30kDataModule
from attnexp.data.text import load_tokenizer
from attnexp.data.translation_text import (
    BOS_ID,
    EOS_ID,
    WORD_START,
    decode_sentence,
    display_tokens,
    normalize_sentence,
    overlap_key,
    train_translation_tokenizer,
    words,
)
from attnexp.errors import ConfigError
from attnexp.predictors import predictor_for


def fra_eng(tmp_path, **kwargs) -> FraEngDataModule:
    write_fra_eng(tmp_path / "data", num_pairs=400)
    settings = dict(
        val_sources=30, test_sources=60, cache_dir=str(tmp_path / "cache"), min_frequency=1
    )
    dm = FraEngDataModule(data_dir=str(tmp_path / "data"), **{**settings, **kwargs})
    dm.setup("fit")
    return dm


def test_the_split_shares_no_source_between_train_and_held_out(tmp_path):
    dm = fra_eng(tmp_path)
    train = {overlap_key(s) for s in dm.splits["train"].sources}
    for stage in ("val", "test"):
        held_out = {overlap_key(s) for s in dm.splits[stage].sources}
        assert held_out and not held_out & train
    assert not {overlap_key(s) for s in dm.splits["val"].sources} & {
        overlap_key(s) for s in dm.splits["test"].sources
    }
    assert dm.summary["test_sources_in_train"] == 0 and dm.source == "local"


def test_a_held_out_source_seen_in_training_up_to_case_and_punctuation_is_dropped():
    pairs = [("Go.", "Va !"), ("go!", "Vas-y !"), ("Run.", "Cours !"), ("Hi.", "Salut.")]
    splits, counts = split_by_source(
        pairs, val_sources=1, test_sources=2, split_seed=0, train_head=1
    )
    assert splits["train"] == [("Go.", "Va !")]
    assert all(s != "go!" for s, _ in splits["test"] + splits["val"])
    assert (
        counts["val_sources_dropped_as_seen_in_train"]
        + counts["test_sources_dropped_as_seen_in_train"]
        == 1
    )


def test_every_reference_of_a_source_is_kept_for_scoring(tmp_path):
    dm = fra_eng(tmp_path)
    refs = dm.references("test")
    assert len(refs) == len(dm.unique_sources("test")) == dm.summary["test_sources"]
    multi = [r for r in refs if len(r) > 1]
    assert multi, "the generated data gives some sources two translations"
    assert all("\u202f" not in ref for r in refs for ref in r)
    decoded = dm.datasets["test"].decode
    assert int(decoded.sum()) == len(refs)  # one decoded pair per source


def test_batches_hold_bos_and_eos_and_masks(tmp_path):
    dm = fra_eng(tmp_path)
    batch = next(iter(dm.train_dataloader()))
    assert (batch["tgt_in"][:, 0] == BOS_ID).all()
    lengths = batch["tgt_mask"].sum(1)
    assert (batch["tgt_out"][torch.arange(len(lengths)), lengths - 1] == EOS_ID).all()
    assert (
        batch["src_mask"].dtype == torch.bool and batch["src_ids"].shape == batch["src_mask"].shape
    )


def test_direction_and_length_filter(tmp_path):
    dm = fra_eng(tmp_path, src="fr", tgt="en", max_tokens=4)
    assert all(len(words(s)) <= 4 for s in dm.splits["train"].sources)
    assert dm.splits["train"].sources[0].split()[0].lower() in {
        "je",
        "tu",
        "il",
        "vois",
        "aime",
        "le",
        "chat",
        "chien",
        "rouge",
        "grand",
        "maison",
        "cours",
    }


def test_embedded_sample_is_used_with_a_note_when_there_is_no_data(tmp_path):
    dm = FraEngDataModule(
        data_dir=str(tmp_path / "none"),
        val_sources=50,
        test_sources=100,
        cache_dir=str(tmp_path / "c"),
    )
    dm.setup("fit")
    assert dm.source == "sample" and any("sample" in n for n in dm.notes)
    assert dm.summary["held_out_sources_drawn"] == 150  # sizes that fit are kept
    assert not any("distinct sources" in n for n in dm.notes)


def test_the_sample_caps_the_full_data_held_out_sizes_with_a_note(tmp_path):
    dm = FraEngDataModule(data_dir=str(tmp_path / "none"), cache_dir=str(tmp_path / "c"))
    dm.setup("fit")  # the defaults, 1,000 + 2,000 sources, are more than the sample holds
    (note,) = [n for n in dm.notes if "distinct sources" in n]
    assert "data.val_sources=1000" in note and "data.test_sources=2000" in note
    distinct = int(note.split(" has ")[1].split()[0])
    drawn = dm.summary["held_out_sources_drawn"]
    assert drawn == int(distinct * 0.1) + int(distinct * 0.2)
    assert dm.summary["train_sources"] > distinct // 2


ENGLISH = ["Don't go, please!", "He bought a new car yesterday.", "Where is it?", "I lost."]
FRENCH = ["Va\u202f!", "J'ai perdu.", "Il est calme.", "Comment vas-tu ?", "Il est calme\xa0!"]


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_cased_text_round_trips_through_the_tokenizer(tmp_path, kind):
    """Decoding restores the text: case, English punctuation against its word, French spacing
    before ! and ?, apostrophes inside their word; saved and loaded, the same."""
    for texts in (ENGLISH, FRENCH):
        tokenizer = train_translation_tokenizer(texts, kind, vocab_size=200, min_frequency=1)
        path = tmp_path / f"{kind}.json"
        tokenizer.save(str(path))
        again = load_tokenizer(path)
        for text in texts:
            ids = again.encode(text, add_special_tokens=False).ids
            assert ids == tokenizer.encode(text, add_special_tokens=False).ids
            assert decode_sentence(again, [BOS_ID, *ids, EOS_ID]) == normalize_sentence(text)
    assert normalize_sentence("Va\u202f!") == "Va !"
    assert normalize_sentence(" Il  est\tcalme\xa0! ") == "Il est calme !"
    lower = train_translation_tokenizer(
        FRENCH, kind, vocab_size=200, min_frequency=1, lowercase=True
    )
    ids = lower.encode("J'ai perdu.", add_special_tokens=False).ids
    assert decode_sentence(lower, ids) == "j'ai perdu."


@pytest.mark.parametrize(
    ("tokens", "text"),
    [
        (["\u2581Il", "\u2581est", "\u2581calme", "."], "Il est calme."),
        (["\u2581Il", "\u2581est", "\u2581calme", "\u2581!"], "Il est calme !"),
        (["\u2581Comment", "\u2581vas-tu", "\u2581?"], "Comment vas-tu ?"),
        (["\u2581J'ai", "\u2581perdu", "."], "J'ai perdu."),
        (["\u2581Don't", "\u2581go", ",", "\u2581please", "!"], "Don't go, please!"),
        (["\u2581Where", "\u2581is", "\u2581it", "?"], "Where is it?"),
        (["\u2581Il", "[UNK]", "."], "Il [UNK]."),
    ],
)
def test_word_tokens_detokenise_to_the_text_a_reader_expects(tokens, text):
    tokenizer = train_translation_tokenizer(
        ENGLISH + FRENCH, "word", vocab_size=200, min_frequency=1
    )
    ids = [tokenizer.token_to_id(t) for t in tokens]
    assert None not in ids
    assert decode_sentence(tokenizer, ids) == text


def test_bpe_pieces_join_into_words_and_labels_carry_no_marker():
    tokenizer = train_translation_tokenizer(FRENCH * 5, "bpe", vocab_size=60, min_frequency=1)
    ids = tokenizer.encode("Comment vas-tu ?", add_special_tokens=False).ids
    assert len(ids) > 3  # a small vocabulary cuts the words into pieces
    assert decode_sentence(tokenizer, ids) == "Comment vas-tu ?"
    labels = display_tokens(tokenizer, ids)
    assert "".join(labels) == "Commentvas-tu?"
    assert not any(WORD_START in label for label in labels)
    alone = train_translation_tokenizer(FRENCH, "bpe", vocab_size=40, min_frequency=1)
    assert display_tokens(alone, [alone.token_to_id(WORD_START)]) == [WORD_START]  # a space


def test_references_are_the_raw_cased_text(tmp_path):
    """Multi-reference scoring reads the targets as written (no-break spaces as spaces), and a
    target decodes back to its reference."""
    dm = fra_eng(tmp_path)
    split, dataset = dm.splits["test"], dm.datasets["test"]
    for i in range(len(split)):
        reference = split.references[split.source_index[i]]
        assert split.targets[i].replace("\u202f", " ") in reference
        assert dm.decode_target(dataset.tgt[i]) == split.targets[i].replace("\u202f", " ")
    assert any(t[0].isupper() for refs in split.references for t in refs)


def test_the_run_dir_tokenizers_are_reused(tmp_path):
    dm = fra_eng(tmp_path)
    dm.save_artifacts(str(tmp_path))
    again = FraEngDataModule(
        data_dir=str(tmp_path / "data"),
        val_sources=30,
        test_sources=60,
        cache_dir=str(tmp_path / "cache"),
    )
    again.load_artifacts(str(tmp_path))
    again.setup("fit")
    assert again.tokenizers["tgt"].to_str() == dm.tokenizers["tgt"].to_str()


def test_multi30k_reads_any_direction(tmp_path):
    write_multi30k(tmp_path / "data")
    dm = Multi30kDataModule(
        data_dir=str(tmp_path / "data"),
        src="fr",
        tgt="de",
        cache_dir=str(tmp_path / "c"),
        min_frequency=1,
    )
    dm.setup("fit")
    assert (dm.summary["train_pairs"], dm.summary["val_pairs"], dm.summary["test_pairs"]) == (
        200,
        40,
        40,
    )
    assert dm.summary["direction"] == "fr->de"


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"src": "xx"}, "data.src"),
        ({"src": "en", "tgt": "en"}, "data.tgt"),
        ({"tokenizer": "char"}, "data.tokenizer"),
    ],
)
def test_bad_settings_name_the_key(tmp_path, kwargs, key):
    with pytest.raises(ConfigError, match=key):
        FraEngDataModule(data_dir=str(tmp_path), **kwargs)


def test_a_line_without_a_tab_names_file_and_line(tmp_path):
    path = tmp_path / "fra.txt"
    path.write_text("Go.\tVa !\nno tab here\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="fra.txt:2"):
        read_fra(path)


def test_too_few_sources_for_the_held_out_sets_names_the_keys():
    pairs = [(f"s{i}.", f"t{i}.") for i in range(10)]
    with pytest.raises(ConfigError, match="data.test_sources"):
        split_by_source(pairs, val_sources=5, test_sources=5, split_seed=0)


def test_a_train_head_that_takes_every_pair_is_named():
    """It ended in '0 distinct sources cannot give 2000 test ...', naming other keys."""
    pairs = [(f"s{i}.", f"t{i}.") for i in range(10)]
    for head in (10, 50):
        with pytest.raises(ConfigError, match=rf"data.train_head={head} .* 10 pairs"):
            split_by_source(pairs, val_sources=1, test_sources=1, split_seed=0, train_head=head)
    splits, _ = split_by_source(pairs, val_sources=1, test_sources=1, split_seed=0, train_head=6)
    assert len(splits["train"]) == 6


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda gz: gz.write_bytes(gz.read_bytes()[:-12]), r"is not a whole gzip file"),
        (lambda gz: gz.write_bytes(b"not gzip at all"), r"is not a whole gzip file"),
        (
            lambda gz: gz.write_bytes(gzip.compress("caf\xe9\n".encode("latin-1"))),
            r"is not UTF-8 text",
        ),
    ],
    ids=["truncated", "not-gzip", "not-utf8"],
)
def test_a_damaged_multi30k_file_is_named(tmp_path, damage, said):
    """EOFError and UnicodeDecodeError came without the file's name (fra.txt's were clean)."""
    folder = write_multi30k(tmp_path / "data")
    damage(folder / "train.en.gz")
    dm = Multi30kDataModule(data_dir=str(tmp_path / "data"), cache_dir=str(tmp_path / "c"))
    with pytest.raises(ConfigError, match=rf"{folder / 'train.en.gz'} {said}"):
        dm.setup("fit")


def test_a_token_id_cache_of_other_texts_is_built_again(tmp_path, caplog):
    """A cache file with another row count gave an IndexError; now it is a cache miss."""
    first = fra_eng(tmp_path)
    caches = sorted((tmp_path / "cache" / "translation").glob("*.pt"))
    assert caches
    for cache in caches:
        flat = torch.load(cache, weights_only=True)
        one_row = {"ids": flat["ids"][:3], "lengths": torch.tensor([3])}
        torch.save(one_row, cache)
    with caplog.at_level("WARNING"):
        again = fra_eng(tmp_path)
    assert "token ids again: the cached one is broken" in caplog.text
    assert "not the" in caplog.text and "rows of these texts" in caplog.text
    assert again.splits["train"].sources == first.splits["train"].sources
    for stage, dataset in first.datasets.items():
        assert again.datasets[stage].src == dataset.src
        assert again.datasets[stage].tgt == dataset.tgt


def test_the_probe_batch_draws_one_alignment_panel_per_sentence(tmp_path):
    from functools import partial

    from attnexp.models.seq2seq import Seq2Seq
    from attnexp.modules.scorers import AdditiveScorer

    dm = fra_eng(tmp_path)
    batch = dm.probe_batch(4)
    model = Seq2Seq(
        dm.model_kwargs["src_vocab_size"],
        dm.model_kwargs["tgt_vocab_size"],
        partial(AdditiveScorer),
        embed_dim=8,
        hidden_size=8,
    ).eval()
    output = model(**batch, return_attention=True)  # what AttentionFigures calls
    predictor = predictor_for(dm)
    figure = predictor.attention_figure(batch, output.logits, output.attention)
    assert (
        len(figure.axes) == 4
        and len(
            set(
                dm.datasets["val"]
                .source_index[dm.datasets["val"].decode.nonzero().flatten()[:4]]
                .tolist()
            )
        )
        == 4
    )
    assert predictor.attention_figure(batch, output.logits, None) is None
