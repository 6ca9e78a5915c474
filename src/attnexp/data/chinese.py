"""Character-level tokenization for Chinese sentence pairs (HF `tokenizers`, WordLevel).

Each CJK character is one token; runs of ASCII letters/digits stay whole ("iphone6" is one token);
any other non-space character (punctuation, emoji) is one token. Text is NFKC-normalised (full-width
"？" -> "?", full-width digits -> ASCII) and lower-cased. A pair is encoded as
`[CLS] a [SEP] b [SEP]` with segment ids 0 for `[CLS] a [SEP]` and 1 for `b [SEP]`, truncated
longest-first to `max_seq_len` tokens. Only the template inserts special ids: "[SEP]" typed in a
text is read as the characters "[", "sep", "]".
"""

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from attnexp.data.text import literal_special_tokens, load_tokenizer, read_lines, write_tokenizer
from attnexp.errors import ConfigError

log = logging.getLogger(__name__)

PAD, UNK, CLS, SEP = "[PAD]", "[UNK]", "[CLS]", "[SEP]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP)
MIN_PAIR_LEN = 5  # [CLS] a [SEP] b [SEP] with at least one token of each text
# CJK unified ideographs (+ extension A, compatibility), then ASCII words/numbers, then any other char.
TOKEN_PATTERN = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[A-Za-z0-9]+|\S"


def _base_tokenizer(vocab: dict[str, int]) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(TOKEN_PATTERN), behavior="isolated"),
        ]
    )
    return tokenizer


def check_pair_len(max_seq_len: int) -> None:
    if max_seq_len < MIN_PAIR_LEN:
        raise ConfigError(
            f"data.max_seq_len={max_seq_len} leaves no room for [CLS] a [SEP] b [SEP] with a "
            f"token of each text (set >= {MIN_PAIR_LEN})"
        )


class PairTokenizer:
    """Wraps a `tokenizers.Tokenizer` with the pair template; build it from texts or a vocab.txt."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
        if missing:
            raise ConfigError(
                f"vocabulary lacks the special tokens {missing} (a vocab needs "
                f"{list(SPECIAL_TOKENS)}: point data.vocab_file or data.tokenizer_path at one that "
                f"has them, or set both to null to build the vocabulary from the training split)"
            )
        self.tokenizer = literal_special_tokens(tokenizer)
        cls_id, sep_id = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{CLS}:0 $A:0 {SEP}:0",
            pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
            special_tokens=[(CLS, cls_id), (SEP, sep_id)],
        )
        tokenizer.no_padding()
        tokenizer.no_truncation()

    @classmethod
    def from_texts(cls, texts: Iterable[str], min_frequency: int = 1) -> "PairTokenizer":
        """Vocabulary of every token in `texts` seen `min_frequency` times (no size cap; specials
        first: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3)."""
        tokenizer = _base_tokenizer({UNK: 0})
        trainer = trainers.WordLevelTrainer(
            vocab_size=10_000_000,  # above any vocabulary: no cap
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer=trainer)
        return cls(tokenizer)

    @classmethod
    def from_vocab_file(cls, path: str | Path) -> "PairTokenizer":
        """A BERT-style vocab.txt (one token per line, id = line number)."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(
                f"vocab file {path} does not exist (set data.vocab_file=... or null to build one)"
            )
        lines = read_lines(path, "a vocab file")
        vocab: dict[str, int] = {}
        for number, token in enumerate((line.strip() for line in lines), start=1):
            if not token or token in vocab:
                what = f"{token!r} again (line {vocab[token] + 1})" if token else "a blank line"
                raise ConfigError(
                    f"vocab file {path}:{number} holds {what}: each line is one token, its id the "
                    f"line number, so a token may appear once (fix the file or set "
                    f"data.vocab_file=null to build a vocab)"
                )
            vocab[token] = number - 1
        return cls(_base_tokenizer(vocab))

    @classmethod
    def load(cls, path: str | Path) -> "PairTokenizer":
        return cls(load_tokenizer(path))

    def save(self, path: str | Path) -> None:
        write_tokenizer(self.tokenizer, path)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def pad_id(self) -> int:
        return self.tokenizer.token_to_id(PAD)

    @property
    def unk_id(self) -> int:
        return self.tokenizer.token_to_id(UNK)

    def fingerprint(self) -> str:
        """Identifies the vocabulary and rules (for the encoding cache key). `to_str()` leaves out
        whether typed special tokens are plain text, so that rule is named here."""
        rule = f"special-tokens-as-text={self.tokenizer.encode_special_tokens}"
        return f"{rule}\n{self.tokenizer.to_str()}"

    def tokenize(self, text: str) -> list[str]:
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def encode_pairs(
        self, texts_a: Sequence[str], texts_b: Sequence[str], max_seq_len: int
    ) -> tuple[list[list[int]], list[list[int]]]:
        """-> (token ids, segment ids) per pair, each at most max_seq_len long."""
        check_pair_len(max_seq_len)
        self.tokenizer.enable_truncation(max_seq_len, strategy="longest_first")
        try:
            encodings = self.tokenizer.encode_batch(list(zip(texts_a, texts_b, strict=True)))
        finally:
            self.tokenizer.no_truncation()
        return [e.ids for e in encodings], [e.type_ids for e in encodings]

    def ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.tokenizer.id_to_token(int(i)) or UNK for i in ids]
