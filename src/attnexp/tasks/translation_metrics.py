"""Translation scores: corpus BLEU and chrF from sacrebleu (multi-reference), and the two BLEUs the
references compute themselves: a plain corpus BLEU over given tokens and d2l's sentence BLEU.
"""

import math
from collections import Counter
from collections.abc import Sequence

import sacrebleu


def reference_streams(references: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Per-source reference lists -> sacrebleu's streams (one per reference rank), None where a
    source has fewer references than the most (sacrebleu skips those)."""
    most = max((len(r) for r in references), default=0)
    return [[r[i] if i < len(r) else None for r in references] for i in range(most)]


def sacrebleu_scores(
    hypotheses: Sequence[str], references: Sequence[Sequence[str]]
) -> dict[str, float | str]:
    """Cased 13a BLEU, BLEU on lowercased text, chrF; each with sacrebleu's signature.

    hypotheses: detokenised text (sacrebleu tokenizes it, and warns when many end in " .");
    references: per source, its raw references."""
    streams = reference_streams(references)
    bleu = sacrebleu.metrics.BLEU()
    bleu_lc = sacrebleu.metrics.BLEU(lowercase=True)
    chrf = sacrebleu.metrics.CHRF()
    scores = {
        "bleu": bleu.corpus_score(list(hypotheses), streams),
        "bleu_lc": bleu_lc.corpus_score(list(hypotheses), streams),
        "chrf": chrf.corpus_score(list(hypotheses), streams),
    }
    out: dict[str, float | str] = {name: float(score.score) for name, score in scores.items()}
    out["signature_bleu"] = str(bleu.get_signature())
    out["signature_bleu_lc"] = str(bleu_lc.get_signature())
    out["signature_chrf"] = str(chrf.get_signature())
    return out


def ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu(
    hypotheses: Sequence[Sequence[str]],
    references: Sequence[Sequence[Sequence[str]]],
    max_n: int = 4,
) -> float:
    """Papineni et al.'s corpus BLEU (0-100) over given tokens, no smoothing: clipped n-gram
    precisions pooled over the corpus, brevity penalty against the closest reference length
    (the shorter on a tie), as sacrebleu computes it."""
    matches, totals = [0] * max_n, [0] * max_n
    hyp_len = ref_len = 0
    for hyp, refs in zip(hypotheses, references, strict=True):
        hyp_len += len(hyp)
        ref_len += min((abs(len(r) - len(hyp)), len(r)) for r in refs)[1]
        for n in range(1, max_n + 1):
            counts = ngrams(hyp, n)
            most = Counter()
            for ref in refs:
                most |= ngrams(ref, n)
            matches[n - 1] += sum(min(c, most[g]) for g, c in counts.items())
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    if hyp_len == 0 or min(matches) == 0:
        return 0.0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals, strict=True)) / max_n
    brevity = min(0.0, 1.0 - ref_len / hyp_len)
    return 100.0 * math.exp(brevity + log_precision)


def d2l_bleu(prediction: str, reference: str, k: int = 2) -> float:
    """d2l's sentence BLEU (section 10.7): exp(min(0, 1 - len_ref / len_pred)) * prod_n p_n^(1/2^n)
    for n <= k, over space-separated tokens; 0-1."""
    pred, ref = prediction.split(), reference.split()
    if not pred:
        return 0.0
    score = math.exp(min(0.0, 1.0 - len(ref) / len(pred)))
    for n in range(1, min(k, len(pred)) + 1):
        available = ngrams(ref, n)
        hits = 0
        for gram in (tuple(pred[i : i + n]) for i in range(len(pred) - n + 1)):
            if available[gram] > 0:
                hits += 1
                available[gram] -= 1
        score *= math.pow(hits / (len(pred) - n + 1), math.pow(0.5, n))
    return score
