"""Text side of translation: normalisation, word/BPE tokenizers with BOS/EOS, detokenisation.

The normalisation: narrow and ordinary no-break spaces become spaces, runs of whitespace one
space, optional lowercasing. The tokens keep the text's spacing: a token that follows a space
starts with the Metaspace marker "▁", and the punctuation marks , . ! ? are tokens of their own
(d2l's split) that carry the marker only where the text had a space before them ("Va !" is
"▁Va", "▁!"; "Go." is "▁Go", "."). The tokenizer's own Metaspace decoder therefore
writes text as the training targets write it: no space before English punctuation, French
spacing before ! and ?, apostrophes inside their word. All of it lives inside each HF
`tokenizers` tokenizer, so the `tokenizer_<side>.json` saved in a run dir reproduces it.
"""

import re
from collections.abc import Iterable, Sequence

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from attnexp.data.text import PAD, PAD_ID, UNK, UNK_ID, literal_special_tokens
from attnexp.errors import ConfigError

BOS, EOS = "[BOS]", "[EOS]"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)  # ids 0..3, in this order
BOS_ID, EOS_ID = 2, 3
NEVER_EMITTED = (PAD_ID, BOS_ID)  # no translation holds them: decoding bans them
TOKENIZERS = ("word", "bpe")
PUNCTUATION = r"[,.!?]"  # d2l's: split off as tokens of their own
WORD_START = "\u2581"  # Metaspace's marker of a token that follows a space
# A punctuation mark with the marker where a space precedes it: "\u2581!" (French) vs "!" (English).
PUNCTUATION_TOKEN = f"{WORD_START}?{PUNCTUATION}"


def translation_normalizer(lowercase: bool) -> normalizers.Normalizer:
    # Unicode whitespace, so the narrow and ordinary no-break spaces French puts before ! ? ; :
    # read as one plain space, as do tabs and doubled spaces.
    steps = [normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps)


def normalize_sentence(text: str, lowercase: bool = False) -> str:
    """The tokenizers' normalisation as a plain function (references for scoring, overlap checks)."""
    return translation_normalizer(lowercase).normalize_str(text)


def words(text: str) -> list[str]:
    """d2l's tokens of a sentence: whitespace-separated words, , . ! ? split off (length filter)."""
    return re.sub(f"({PUNCTUATION})", r" \1 ", normalize_sentence(text)).split()


def overlap_key(text: str) -> str:
    """A sentence with case and punctuation ignored: two sources with the same key are the same
    sentence for the train/test overlap check ("Go." and "go!" are)."""
    return " ".join(re.sub(r"[^\w\s']", " ", normalize_sentence(text, lowercase=True)).split())


def check_tokenizer_kind(kind: str) -> None:
    if kind not in TOKENIZERS:
        raise ConfigError(
            f"data.tokenizer '{kind}' is not one of {', '.join(TOKENIZERS)} (set data.tokenizer=...)"
        )


def train_translation_tokenizer(
    texts: Iterable[str],
    kind: str = "word",
    vocab_size: int = 10000,
    min_frequency: int = 2,
    lowercase: bool = False,
) -> Tokenizer:
    """A tokenizer for one side of the pairs, trained on the training split only.

    word: d2l's words (whitespace, , . ! ? split off), the `vocab_size` most frequent seen at least
    `min_frequency` times. bpe: byte-pair merges within the same words. Both mark the tokens that
    follow a space (Metaspace), so decoding restores the text's spacing (the module docstring).
    Ids 0..3 are [PAD], [UNK], [BOS], [EOS] for both.
    """
    check_tokenizer_kind(kind)
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ConfigError(
            f"data.vocab_size={vocab_size} must be > {len(SPECIAL_TOKENS)} (set data.vocab_size=...)"
        )
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
        raise ConfigError(
            f"data.min_frequency={min_frequency} must be >= 1 (set data.min_frequency=...)"
        )
    if kind == "word":
        tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
        # An unknown word loses its marker with its text: give [UNK] one back when decoding.
        tokenizer.decoder = decoders.Sequence(
            [decoders.Replace(UNK, WORD_START + UNK), decoders.Metaspace()]
        )
        trainer = trainers.WordLevelTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS)
        )
    else:
        tokenizer = Tokenizer(models.BPE(unk_token=UNK))
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS)
        )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(prepend_scheme="always", split=True),  # "\u2581word" per word
            pre_tokenizers.Split(Regex(PUNCTUATION_TOKEN), behavior="isolated"),
        ]
    )
    tokenizer.normalizer = translation_normalizer(lowercase)
    tokenizer.train_from_iterator(texts, trainer)
    ids = [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
    if ids != [PAD_ID, UNK_ID, BOS_ID, EOS_ID]:
        raise RuntimeError(f"special tokens got ids {ids}, not 0..3")
    return literal_special_tokens(tokenizer)


def check_translation_ids(tokenizer: Tokenizer, source: str) -> Tokenizer:
    """A tokenizer loaded from a file must number the special tokens as ours do."""
    found = [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
    if found != [PAD_ID, UNK_ID, BOS_ID, EOS_ID]:
        raise ConfigError(
            f"{source}: a translation tokenizer must map {', '.join(SPECIAL_TOKENS)} to ids 0..3, "
            f"found {found} (give a tokenizer_<side>.json written by attnexp)"
        )
    return tokenizer


def encode_sentences(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids without BOS/EOS (the collate function adds them); a typed "[PAD]" reads as [UNK]."""
    return [
        [UNK_ID if i == PAD_ID else i for i in enc.ids]
        for enc in tokenizer.encode_batch(list(texts), add_special_tokens=False)
    ]


def strip_special(ids: Sequence[int]) -> list[int]:
    """Ids up to the first EOS, without BOS and padding."""
    out = []
    for i in ids:
        if i == EOS_ID:
            break
        if i not in (PAD_ID, BOS_ID):
            out.append(int(i))
    return out


def decode_sentence(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """The text of a hypothesis as a reader gets it and BLEU scores it: the tokenizer's decoder
    joins the tokens with the spacing they carry ([UNK] kept, so an unknown word costs its
    n-grams)."""
    return tokenizer.decode(strip_special(ids), skip_special_tokens=False)


def display_tokens(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Token labels for figures and `predictions.jsonl`: the text of each token, without the
    word-start marker (a marker standing alone shows as itself)."""
    return [
        token.removeprefix(WORD_START) or token
        for token in (tokenizer.id_to_token(int(i)) for i in ids)
    ]
