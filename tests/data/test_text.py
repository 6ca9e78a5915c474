import pytest
from tokenizers import Tokenizer

from attnexp.data.caches import default_cache_dir
from attnexp.data.text import (
    PAD,
    PAD_ID,
    UNK_ID,
    encode_texts,
    load_tokenizer,
    normalize_text,
    read_lines,
    save_tokenizer,
    text_normalizer,
    texts_hash,
    tokenize_dataset,
    tokenizer_hash,
    train_word_tokenizer,
    word_pre_tokenizer,
)
from attnexp.errors import ConfigError

TEXTS = ["A great film.<br />Loved it!", "A boring film<br/>hated it", "great great story"]


def test_normalize_lowercases_and_removes_breaks():
    assert normalize_text("Great<br />FILM<br/>x") == "great film x"
    # Before lowercasing, so a break in capitals is removed too, not read as a "<br>" token.
    assert normalize_text("Great<BR>FILM<Br />x") == "great film x"


def test_special_ids_and_unknown_words():
    tok = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1)
    assert tok.token_to_id(PAD) == PAD_ID and tok.token_to_id("[UNK]") == UNK_ID
    ids = tok.encode("GREAT zzqx", add_special_tokens=False).ids
    assert ids[0] == tok.token_to_id("great") and ids[1] == UNK_ID
    assert "br" not in tok.get_vocab()


def test_min_frequency_and_vocab_size():
    tok = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=2)
    assert set(tok.get_vocab()) == {"[PAD]", "[UNK]", "a", "film", "great", "it"}
    assert train_word_tokenizer(TEXTS, vocab_size=4, min_frequency=1).get_vocab_size() == 4
    assert train_word_tokenizer(TEXTS, vocab_size=3).get_vocab_size() == 3  # one word: the least
    with pytest.raises(
        ConfigError, match=r"vocab_size=2 must be > 2 \(set data.vocab_size=\.\.\.\)"
    ):
        train_word_tokenizer(TEXTS, vocab_size=2)
    with pytest.raises(
        ConfigError, match=r"min_frequency=0 must be >= 1 \(set data.min_frequency="
    ):
        train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=0)


def test_word_split_keeps_splits_or_drops_punctuation():
    by_punct = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1)
    by_space = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1, split="whitespace")
    words = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1, split="words")
    assert {"film", "."} <= set(by_punct.get_vocab()) and "film." not in by_punct.get_vocab()
    assert {"film.", "it!"} <= set(by_space.get_vocab()) and "!" not in by_space.get_vocab()
    assert {"film", "it"} <= set(words.get_vocab())
    assert not {".", "!", "film.", "it!"} & set(words.get_vocab())
    assert words.encode("Great film!!").tokens == ["great", "film"]
    with pytest.raises(ConfigError, match="data.word_split"):
        train_word_tokenizer(TEXTS, split="spaces")


def test_save_load_round_trip(tmp_path):
    tok = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1)
    save_tokenizer(tok, tmp_path)
    loaded = load_tokenizer(tmp_path)  # a run dir works as well as the file
    assert encode_texts(loaded, TEXTS, 50) == encode_texts(tok, TEXTS, 50)
    assert tokenizer_hash(loaded) == tokenizer_hash(tok)
    with pytest.raises(ConfigError, match="data.tokenizer_path"):
        load_tokenizer(tmp_path / "nope")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not a valid tokenizer"):
        load_tokenizer(tmp_path / "bad.json")


def test_a_run_tokenizer_is_never_replaced_and_the_cause_is_said(tmp_path):
    """A resumed attempt builds its tokenizer again: another rule of cutting words means another
    attnexp version, other words by the same rule other training texts: the message says which."""
    tok = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1)
    save_tokenizer(tok, tmp_path)
    save_tokenizer(train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1), tmp_path)
    older = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1)
    older.normalizer = text_normalizer(strip_html_breaks=False)
    with pytest.raises(ConfigError, match=r"another rule .* \(normalizer differ\).* version"):
        save_tokenizer(older, tmp_path)
    other_split = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1)
    other_split.pre_tokenizer = word_pre_tokenizer("whitespace")
    with pytest.raises(ConfigError, match=r"another rule .* \(pre_tokenizer differ\)"):
        save_tokenizer(other_split, tmp_path)
    older_words = train_word_tokenizer(["<br />", *TEXTS], vocab_size=100, min_frequency=1)
    older_words.normalizer = text_normalizer(strip_html_breaks=False)  # other words too
    with pytest.raises(ConfigError, match=r"another rule"):
        save_tokenizer(older_words, tmp_path)
    other = train_word_tokenizer(TEXTS[:1], vocab_size=100, min_frequency=1)
    with pytest.raises(ConfigError, match=r"this attempt built another one \(its training texts"):
        save_tokenizer(other, tmp_path)
    assert load_tokenizer(tmp_path).to_str() == tok.to_str()


def test_encode_truncates_and_handles_empty():
    tok = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1)
    assert encode_texts(tok, ["great " * 10, "", "   "], 4) == [
        [tok.token_to_id("great")] * 4,
        [],
        [],
    ]


def test_texts_hash_depends_on_content_and_settings():
    assert texts_hash(["ab", "c"]) != texts_hash(["a", "bc"])
    assert texts_hash(TEXTS, 1) != texts_hash(TEXTS, 2)
    assert texts_hash(TEXTS, 1) == texts_hash(list(TEXTS), 1)


def test_head_tail_truncation():
    from attnexp.data.text import truncate

    ids = list(range(10))
    assert truncate(ids, 4, "head") == [0, 1, 2, 3]
    assert truncate(ids, 5, "head_tail") == [0, 1, 2, 8, 9]
    assert truncate(ids[:3], 5, "head_tail") == [0, 1, 2]
    with pytest.raises(ConfigError, match="data.truncation"):
        truncate(ids, 4, "middle")


def test_typed_special_tokens_are_plain_words(tmp_path):
    tok = train_word_tokenizer([*TEXTS, "pad unk [ ]"], vocab_size=100, min_frequency=1)
    typed = "great [PAD] [UNK] film"
    assert tok.encode(typed).tokens == ["great", "[", "pad", "]", "[", "unk", "]", "film"]
    save_tokenizer(tok, tmp_path)
    earlier = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))  # as saved by earlier runs
    loaded = load_tokenizer(tmp_path)
    assert PAD_ID in earlier.encode(typed).ids and PAD_ID not in loaded.encode(typed).ids
    # normal text keeps its ids, and the cache keys stay the same
    assert encode_texts(loaded, TEXTS, 50) == encode_texts(earlier, TEXTS, 50)
    assert tokenizer_hash(loaded) == tokenizer_hash(earlier)


@pytest.mark.parametrize("damage", [b"", b"\xff\xff\xff\xff\x10\x00"])
def test_a_broken_token_id_cache_is_encoded_again(tmp_path, damage, caplog):
    """A cache file cut short or emptied stopped the run with pyarrow's ArrowInvalid."""
    from datasets import Dataset

    tokenizer = train_word_tokenizer(TEXTS, vocab_size=100, min_frequency=1)
    data = Dataset.from_dict({"text": TEXTS, "label": [1, 0, 1]})
    cache = tmp_path / "cache" / "train.arrow"
    first = list(tokenize_dataset(data, tokenizer, 8, cache)["input_ids"])  # read before damage
    cache.write_bytes(cache.read_bytes()[:200] if damage == b"" else damage)
    again = tokenize_dataset(data, tokenizer, 8, cache)
    assert list(again["input_ids"]) == first
    assert "encoding again: the cached token ids" in caplog.text
    assert list(tokenize_dataset(data, tokenizer, 8, cache)["input_ids"]) == first


def test_a_typed_pad_token_reads_as_unknown_never_as_padding():
    """With lowercase=false and a whitespace split the word "[PAD]" matched the vocabulary's
    [PAD]: id 0 at a real position, drawn with weight in the heatmaps."""
    tokenizer = train_word_tokenizer(
        ["a b c great film x"] * 3, 100, 1, lowercase=False, split="whitespace"
    )
    great, film = tokenizer.token_to_id("great"), tokenizer.token_to_id("film")
    assert encode_texts(tokenizer, ["great [PAD] [UNK] film"], 10) == [
        [great, UNK_ID, UNK_ID, film]
    ]


def test_read_lines_drops_the_bom_and_windows_line_ends_only(tmp_path):
    """A vocab or texts file saved by Notepad: BOM and CRLF go; a word's own spaces and tabs stay."""
    path = tmp_path / "lines.txt"
    path.write_bytes("\ufeffa b \r\n\tc\t\r\nd".encode())
    assert read_lines(path, "a file") == ["a b ", "\tc\t", "d"]


def test_the_cache_dir_expands_a_home_in_attnexp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ATTNEXP_CACHE", "~/ids")
    assert default_cache_dir() == tmp_path / "ids"
    monkeypatch.delenv("ATTNEXP_CACHE")
    assert default_cache_dir() == tmp_path / ".cache" / "attnexp"
