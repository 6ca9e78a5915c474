"""Our BLEUs against sacrebleu and d2l's published numbers; multi-reference scoring."""

import math

import pytest
import sacrebleu

from attnexp.tasks.translation_metrics import (
    corpus_bleu,
    d2l_bleu,
    reference_streams,
    sacrebleu_scores,
)

HYPOTHESES = ["the cat sat on the mat .", "there is a cat on the mat", "a dog runs in the big park"]
REFERENCES = [
    ["the cat is on the mat .", "there is a cat on the mat ."],
    ["there is a cat on the mat ."],
    ["a dog is running in the park", "the dog runs in a big park"],
]


def test_our_corpus_bleu_equals_sacrebleu_on_known_strings():
    ours = corpus_bleu(
        [h.split() for h in HYPOTHESES], [[r.split() for r in refs] for refs in REFERENCES]
    )
    theirs = sacrebleu.corpus_bleu(
        HYPOTHESES, reference_streams(REFERENCES), tokenize="none", smooth_method="none"
    )
    assert ours > 0 and math.isclose(ours, theirs.score, rel_tol=1e-9)


def test_single_reference_and_short_hypotheses_take_the_brevity_penalty():
    hyps, refs = ["a b c d"], [["a b c d e f g h"]]
    ours = corpus_bleu([h.split() for h in hyps], [[r.split() for r in rs] for rs in refs])
    theirs = sacrebleu.corpus_bleu(
        hyps, reference_streams(refs), tokenize="none", smooth_method="none"
    )
    assert (
        math.isclose(ours, theirs.score, rel_tol=1e-9) and ours < 100 * math.exp(1 - 8 / 4) + 1e-9
    )


def test_d2l_bleu_reproduces_the_chapters_scores():
    """d2l's 'he's calm . => il est riche ., bleu 0.658' and its exact matches at 1.000."""
    assert d2l_bleu("il est riche .", "il est calme .", k=2) == pytest.approx(0.658, abs=5e-4)
    assert d2l_bleu("va !", "va !", k=2) == 1.0
    assert d2l_bleu("", "va !", k=2) == 0.0


def test_sacrebleu_scores_use_every_reference_and_record_signatures():
    scores = sacrebleu_scores(
        ["The cat is on the mat."], [["the cat is on the mat.", "The cat is on the mat."]]
    )
    assert scores["bleu"] == pytest.approx(100.0)
    only_first = sacrebleu_scores(["The cat is on the mat."], [["the cat is on the mat."]])
    assert only_first["bleu"] < 100.0 and only_first["bleu_lc"] == pytest.approx(100.0)
    assert "nrefs:2" in scores["signature_bleu"] and "case:lc" in scores["signature_bleu_lc"]
    assert scores["signature_chrf"].startswith("nrefs:2")
