"""The text pipeline the text DataModules (IMDB, LCQMC) share: normalisation, HF `tokenizers`
tokenizers trained on the training split or reused, saved in the run dir, and the caches.

One meaning of the settings for every text dataset:
- `data.tokenizer_path`: reuse a saved tokenizer (a `tokenizer.json`, or a run dir holding one)
  instead of training one on the training split (`reused_tokenizer`).
- `data.cache_dir`: the cache root; a dataset caches under `<cache_dir>/<data_subdir>/` its
  trained tokenizers and the token ids of each split, keyed by a hash of everything that changes
  them (`texts_hash`), so a second run with the same data and settings skips both
  (`attnexp.data.caches`).
- `data.split_seed`: draws the held-out examples; null: the run's seed (see `data/splits.py`).

A tokenizer carries its own normaliser (lowercase, `<br />` removal), so the `tokenizer.json` saved
in a run dir reproduces exactly what training saw when evaluate/predict reload it.
"""

import gzip
import hashlib
import json
import logging
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from attnexp.errors import ConfigError
from attnexp.files import write_atomically
from attnexp.schema import rule_for

log = logging.getLogger(__name__)

PAD, UNK = "[PAD]", "[UNK]"
SPECIAL_TOKENS = (PAD, UNK)  # ids 0 and 1, in this order
PAD_ID, UNK_ID = 0, 1
TOKENIZER_FILE = "tokenizer.json"
HTML_BREAK = r"(?i)<br\s*/?>"  # any case: <br />, <BR>, <Br/>


def text_normalizer(
    lowercase: bool = True, strip_html_breaks: bool = True
) -> normalizers.Normalizer:
    """NFKC, `<br />` -> space, optional lowercasing; runs inside the tokenizer."""
    steps = [normalizers.NFKC()]
    if strip_html_breaks:
        steps.append(normalizers.Replace(Regex(HTML_BREAK), " "))
    if lowercase:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps)


def normalize_text(text: str, lowercase: bool = True, strip_html_breaks: bool = True) -> str:
    """The tokenizer's normalisation as a plain function (for display and tests)."""
    return text_normalizer(lowercase, strip_html_breaks).normalize_str(text)


def not_utf8(path: Path, err: UnicodeDecodeError, what: str) -> ConfigError:
    return ConfigError(
        f"{path} is not UTF-8 text ({err.reason} at byte {err.start}): {what} must be UTF-8 "
        f"(convert it, e.g. iconv -f GBK -t UTF-8)"
    )


def read_lines(path: Path, what: str) -> list[str]:
    """A text file's lines (`what` names it in errors): UTF-8 with a BOM dropped, split at "\n"
    only (a form feed or U+2028 stays inside its line), a Windows "\r" line end removed. A
    `.gz` file is read through gzip; one cut short or corrupt is refused naming it."""
    try:
        if Path(path).suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8-sig") as handle:
                text = handle.read()
        else:
            text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise not_utf8(path, err, what) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ConfigError(
            f"{path} is not a whole gzip file ({type(err).__name__}: {err}): {what} was cut short "
            f"or damaged (download it again, or put the uncompressed file there)"
        ) from None
    lines = text.removesuffix("\n").split("\n") if text else []
    return [line.removesuffix("\r") for line in lines]


def literal_special_tokens(tokenizer: Tokenizer) -> Tokenizer:
    """Make "[PAD]", "[UNK]", ... typed in a text plain characters, never special ids (only the
    code inserts those). Ids of other text are unchanged. The setting is not part of
    `tokenizer.json` (nor of `tokenizer_hash`), so every tokenizer built or loaded gets it here."""
    tokenizer.encode_special_tokens = True
    return tokenizer


def train_tokenizer(
    texts: Iterable[str],
    pre_tokenizer: pre_tokenizers.PreTokenizer,
    vocab_size: int,
    min_frequency: int,
    normalizer: normalizers.Normalizer | None = None,
) -> Tokenizer:
    """A WordLevel tokenizer over the units `pre_tokenizer` cuts out (words, characters, ...).

    The vocabulary keeps the `vocab_size` most frequent units seen at least `min_frequency` times;
    `[PAD]` is id 0 and `[UNK]` id 1. Everything else maps to `[UNK]`.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ConfigError(
            f"vocab_size={vocab_size} must be > {len(SPECIAL_TOKENS)} (set data.vocab_size=...)"
        )
    if min_frequency < 1:
        raise ConfigError(
            f"min_frequency={min_frequency} must be >= 1 (set data.min_frequency=...)"
        )
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
    tokenizer.normalizer = normalizer if normalizer is not None else text_normalizer()
    tokenizer.pre_tokenizer = pre_tokenizer
    trainer = trainers.WordLevelTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS)
    )
    tokenizer.train_from_iterator(texts, trainer)
    if tokenizer.token_to_id(PAD) != PAD_ID or tokenizer.token_to_id(UNK) != UNK_ID:
        raise RuntimeError("special tokens did not get ids 0 and 1")
    return literal_special_tokens(tokenizer)


def check_word_ids(tokenizer: Tokenizer, source: str, setting: str) -> Tokenizer:
    """A word-level tokenizer from elsewhere must give [PAD] id 0 and [UNK] id 1, as ours do:
    padding and masks rely on those ids."""
    found = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    if found != {PAD: PAD_ID, UNK: UNK_ID}:
        raise ConfigError(
            f"{source}: the tokenizer must map {PAD} to id {PAD_ID} and {UNK} to id {UNK_ID}, "
            f"found {found} (set {setting}=<a tokenizer.json written by attnexp>)"
        )
    return tokenizer


# How a normalised text is cut into words before the vocabulary lookup.
WORD_SPLITS = {
    "punctuation": pre_tokenizers.Whitespace,  # words and punctuation runs: `\\w+|[^\\w\\s]+`
    "whitespace": pre_tokenizers.WhitespaceSplit,  # `text.split()`: "great!" stays one token
    # Words only (`\\w+`): punctuation is dropped, so max_seq_len tokens hold more words.
    "words": lambda: pre_tokenizers.Split(Regex(r"[^\w]+"), behavior="removed"),
}


def word_pre_tokenizer(split: str) -> pre_tokenizers.PreTokenizer:
    if split not in WORD_SPLITS:
        raise ConfigError(
            f"word split '{split}' is not one of {', '.join(WORD_SPLITS)} (set data.word_split=...)"
        )
    return WORD_SPLITS[split]()


def train_word_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 30000,
    min_frequency: int = 2,
    lowercase: bool = True,
    split: str = "punctuation",
) -> Tokenizer:
    """Word-level tokens (`split`: see WORD_SPLITS) after `text_normalizer`."""
    return train_tokenizer(
        texts, word_pre_tokenizer(split), vocab_size, min_frequency, text_normalizer(lowercase)
    )


def write_tokenizer(tokenizer: Tokenizer, path: str | Path) -> Path:
    """Atomically (see `write_atomically`)."""
    return write_atomically(Path(path), lambda partial: tokenizer.save(str(partial)))


def save_tokenizer(tokenizer: Tokenizer, folder: str | Path) -> Path:
    """The run dir's `tokenizer.json`. A resumed run finds the one its checkpoint was trained with
    there already: it is kept, and a different one (other training texts) is refused, not
    written over it."""
    path = Path(folder) / TOKENIZER_FILE
    if path.is_file():
        try:
            saved = json.loads(Tokenizer.from_file(str(path)).to_str())
        except Exception:  # tokenizers raises a bare Exception on bad JSON
            saved = None
        built = json.loads(tokenizer.to_str())
        if saved == built:
            return path
        rules = ("normalizer", "pre_tokenizer")  # how text is cut into words: code, not data
        changed = [k for k in rules if saved is not None and saved.get(k) != built.get(k)]
        if changed:
            raise ConfigError(
                f"{path} holds the tokenizer this run was trained with, and it cuts text into "
                f"words by another rule than this version's ({' and '.join(changed)} differ): the "
                f"run was made by another version of attnexp, and a resumed run must read its "
                f"texts as it was trained. Test it again "
                f"with python -m attnexp.evaluate ckpt_path={folder} (it uses the saved "
                f"tokenizer), or start a new run"
            )
        raise ConfigError(
            f"{path} holds the tokenizer this run was trained with, and this attempt built another "
            f"one (its training texts differ: another paths.data_dir, or seed=null drawing a new "
            f"split); the checkpoint's token ids mean the saved one's words: resume with the run's "
            f"data and seed=<the seed in its metrics.json>, or start a new run"
        )
    return write_tokenizer(tokenizer, path)


def load_tokenizer(path: str | Path, setting: str = "data.tokenizer_path") -> Tokenizer:
    """Load a `tokenizer.json` (or the one inside a run dir); `setting` is where it was given."""
    path = Path(path)
    if path.is_dir():
        path = path / TOKENIZER_FILE
    if not path.is_file():
        raise ConfigError(
            f"no tokenizer at {path} (a run dir holds {TOKENIZER_FILE} after training; "
            f"set {setting}=<run dir or file>)"
        )
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on bad JSON
        raise ConfigError(
            f"{path} is not a valid tokenizer file ({err}; set {setting}=<a tokenizer.json>)"
        ) from err
    return literal_special_tokens(tokenizer)


def tokenizer_hash(tokenizer: Tokenizer) -> str:
    return hashlib.sha256(tokenizer.to_str().encode()).hexdigest()[:16]


def texts_hash(texts: Sequence[str], *extra: object) -> str:
    """A content hash of the texts (and any settings that change the result)."""
    digest = hashlib.sha256(repr(extra).encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


def reused_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer `data.tokenizer_path` names (a file or a run dir), to read text as the run
    that saved it did."""
    return load_tokenizer(path, setting="data.tokenizer_path")


TRUNCATIONS = rule_for("data.truncation").choices


def truncate(ids: list[int], max_len: int, truncation: str = "head") -> list[int]:
    """Cut to `max_len` ids: the first ones ("head"), or the first and last halves ("head_tail":
    a review's verdict often sits in its last sentences)."""
    if len(ids) <= max_len:
        return ids
    if truncation == "head":
        return ids[:max_len]
    if truncation == "head_tail":
        head = (max_len + 1) // 2
        return ids[:head] + ids[len(ids) - (max_len - head) :]
    raise ConfigError(
        f"truncation '{truncation}' is not one of {', '.join(TRUNCATIONS)} (set data.truncation=...)"
    )


def encode_texts(
    tokenizer: Tokenizer, texts: Sequence[str], max_len: int, truncation: str = "head"
) -> list[list[int]]:
    """Token ids of each text, cut to `max_len` tokens (see `truncate`; an empty text gives []).

    A word that is the padding token's name ("[PAD]" typed in a text, kept whole by
    `lowercase=false word_split=whitespace`) reads as [UNK]: the padding id marks no word.
    """
    return [
        truncate([UNK_ID if i == PAD_ID else i for i in enc.ids], max_len, truncation)
        for enc in tokenizer.encode_batch(list(texts), add_special_tokens=False)
    ]


def tokenize_dataset(
    dataset,
    tokenizer: Tokenizer,
    max_len: int,
    cache_file: Path | None,
    text_column: str = "text",
    truncation: str = "head",
):
    """Add `input_ids` and `length` columns with `datasets.map(batched=True)`, cached in `cache_file`.

    A cache file that exists is reused as is; its name must therefore encode everything that
    changes the ids (see `texts_hash`, `tokenizer_hash`).
    """

    def encode(batch: dict) -> dict:
        ids = encode_texts(tokenizer, batch[text_column], max_len, truncation)
        return {"input_ids": ids, "length": [len(x) for x in ids]}

    if cache_file is None:
        return dataset.map(encode, batched=True, batch_size=1000, desc="tokenize")
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {"cache_file_name": str(cache_file), "load_from_cache_file": True}
    if cache_file.is_file():
        log.info("token ids from cache %s", cache_file)
        try:
            return dataset.map(encode, batched=True, batch_size=1000, desc="tokenize", **kwargs)
        except (pyarrow.ArrowException, OSError) as err:  # cut short, emptied: a cache miss
            log.warning("encoding again: the cached token ids %s are broken (%s)", cache_file, err)
            cache_file.unlink(missing_ok=True)
    return dataset.map(encode, batched=True, batch_size=1000, desc="tokenize", **kwargs)
