"""Tiny generated sentence pairs (a made-up word-for-word 'French'), shared by the translation tests."""

import gzip
import random
from pathlib import Path

EN = ["i", "you", "he", "see", "like", "the", "cat", "dog", "red", "big", "house", "run"]
FR = ["je", "tu", "il", "vois", "aime", "le", "chat", "chien", "rouge", "grand", "maison", "cours"]
DE = ["ich", "du", "er", "sehe", "mag", "der", "katze", "hund", "rot", "gross", "haus", "laufe"]


def sentence_pair(rng: random.Random, vocabularies: tuple[list[str], ...]) -> tuple[str, ...]:
    picks = rng.choices(range(len(EN)), k=rng.randint(1, 6))
    end = rng.choice([".", "!", "?"])
    return tuple(" ".join(v[i] for i in picks).capitalize() + end for v in vocabularies)


def write_fra_eng(data_dir: Path, num_pairs: int = 400, seed: int = 0) -> Path:
    """<data_dir>/fra-eng/fra.txt: English<TAB>French<TAB>attribution, some sources twice with
    another translation (multi-reference), a narrow no-break space before ! as in the real file."""
    rng = random.Random(seed)
    lines = []
    for _ in range(num_pairs):
        en, fr = sentence_pair(rng, (EN, FR))
        fr = fr.replace("!", "\u202f!")
        lines.append(f"{en}\t{fr}\tCC-BY 2.0 (France) Attribution: tatoeba.org #1 (x) & #2 (y)")
        if rng.random() < 0.2:
            other = fr.rstrip(".!?\u202f") + " ..."
            lines.append(f"{en}\t{other}\tCC-BY")
    folder = Path(data_dir) / "fra-eng"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fra.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def write_multi30k(data_dir: Path, sizes: dict | None = None, seed: int = 0) -> Path:
    """<data_dir>/multi30k/{train,val,test_2016_flickr}.{en,de,fr}.gz, line-aligned."""
    rng = random.Random(seed)
    folder = Path(data_dir) / "multi30k"
    folder.mkdir(parents=True, exist_ok=True)
    for stem, n in (sizes or {"train": 200, "val": 40, "test_2016_flickr": 40}).items():
        rows = [sentence_pair(rng, (EN, DE, FR)) for _ in range(n)]
        for column, lang in enumerate(("en", "de", "fr")):
            with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as handle:
                handle.write("\n".join(r[column] for r in rows) + "\n")
    return folder
