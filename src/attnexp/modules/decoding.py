"""Greedy and batched beam-search decoding for any encoder-decoder with a step interface.

A model decodes through two calls (shapes: B batch, S source, V target vocabulary):
- `start(src_ids, src_mask) -> state`: a dict of tensors, each with the batch first;
- `step(state, prev_tokens (B,)) -> (logits (B, V), state, attention (B, S) or None)`.
Beams are reordered by indexing every state tensor on its first axis, so a model's state needs
nothing more than batch-first tensors.
"""

from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F

State = dict[str, torch.Tensor]


class StepDecoder(Protocol):
    """An encoder-decoder that decodes one token at a time (`Seq2Seq`, `TransformerSeq2Seq`)."""

    def start(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> State:
        """src_ids, src_mask (B, S) -> the first state: batch-first tensors."""
        ...

    def step(
        self, state: State, prev: torch.Tensor
    ) -> tuple[torch.Tensor, State, torch.Tensor | None]:
        """prev (B,) -> logits (B, V), the next state, attention (B, S) or None."""
        ...


class Hypothesis(NamedTuple):
    tokens: list[int]  # without BOS and EOS
    score: float  # length-normalised log-probability (beam) or summed log-probability (greedy)
    attention: torch.Tensor | None  # (len(tokens) + 1, S): one row per emitted token, EOS included


def select_state(state: State, index: torch.Tensor) -> State:
    return {k: v.index_select(0, index) for k, v in state.items()}


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's ((5 + length) / 6) ** alpha (Wu et al. 2016); alpha = 0: none."""
    return ((5.0 + length) / 6.0) ** alpha


def ban(log_probs: torch.Tensor, banned_ids: tuple[int, ...]) -> torch.Tensor:
    """Tokens no translation may hold (padding, BOS) get probability 0."""
    if banned_ids:
        log_probs[:, list(banned_ids)] = float("-inf")
    return log_probs


@torch.no_grad()
def free_running_logits(
    model: StepDecoder, src_ids: torch.Tensor, src_mask: torch.Tensor, bos_id: int, steps: int
) -> torch.Tensor:
    """The logits (B, steps, V) of a decoder fed its own argmax from BOS on, for `steps` steps
    whatever it emits (EOS included, no token banned): teacher forcing 0, what bentrevett's
    `evaluate` scores against the reference."""
    state = model.start(src_ids, src_mask)
    prev = torch.full((src_ids.shape[0],), bos_id, dtype=torch.long, device=src_ids.device)
    rows = []
    for _ in range(steps):
        logits, state, _ = model.step(state, prev)  # (B, V)
        rows.append(logits)
        prev = logits.argmax(dim=-1)  # (B,)
    return torch.stack(rows, dim=1)  # (B, steps, V)


@torch.no_grad()
def greedy_decode(
    model: StepDecoder,
    src_ids: torch.Tensor,
    src_mask: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_len: int,
    banned_ids: tuple[int, ...] = (),
) -> list[Hypothesis]:
    """The most probable token each step, until EOS; at `max_len` tokens every sentence is made
    to end (EOS counted), as `beam_search` does, so beam size 1 gives the same hypotheses."""
    B = src_ids.shape[0]
    state = model.start(src_ids, src_mask)
    prev = torch.full((B,), bos_id, dtype=torch.long, device=src_ids.device)
    tokens, scores, rows = [], torch.zeros(B, device=src_ids.device), []
    done = torch.zeros(B, dtype=torch.bool, device=src_ids.device)
    for t in range(max_len):
        logits, state, attention = model.step(state, prev)
        log_probs = ban(F.log_softmax(logits.float(), dim=-1), banned_ids)  # (B, V)
        best, prev = log_probs.max(dim=-1)  # (B,)
        if t == max_len - 1:
            best, prev = log_probs[:, eos_id], torch.full_like(prev, eos_id)
        scores += best * ~done
        tokens.append(prev)
        rows.append(attention)
        done = done | (prev == eos_id)
        if bool(done.all()):
            break
    tokens = torch.stack(tokens, dim=1).tolist()  # (B, steps)
    out = []
    for b in range(B):
        length = tokens[b].index(eos_id) + 1  # every row ends with EOS by max_len
        attention = None if rows[0] is None else torch.stack([r[b] for r in rows[:length]]).cpu()
        out.append(Hypothesis(tokens[b][: length - 1], float(scores[b]), attention))  # (length, S)
    return out


def only_eos(log_probs: torch.Tensor, eos_id: int) -> torch.Tensor:
    """(N, V) log-probabilities with every token but EOS at probability 0: the step that ends."""
    forced = torch.full_like(log_probs, float("-inf"))
    forced[:, eos_id] = log_probs[:, eos_id]
    return forced


def select_beams(rows: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """rows (B, K, ...) -> the rows of the (B * K,) flat beam indices `flat`, (B, K, ...)."""
    B, K = rows.shape[:2]
    return rows.reshape(B * K, *rows.shape[2:])[flat].view(B, K, *rows.shape[2:])


def add_finished(
    finished: list[list[Hypothesis]],
    tokens: torch.Tensor,
    beam: torch.Tensor,
    top_scores: torch.Tensor,
    is_eos: torch.Tensor,
    attention_rows: torch.Tensor | None,
    divisor: float,
) -> None:
    """Each EOS among the K best candidates (B, 2K) of a sentence with fewer than K finished
    hypotheses finishes one: beam `beam[b, j]`'s tokens (B, K, t) after BOS, its score over
    `divisor` (the length penalty)."""
    K = tokens.shape[1]
    done = [len(hyps) >= K for hyps in finished]
    for b, j in (is_eos[:, :K] & torch.isfinite(top_scores[:, :K])).nonzero().tolist():
        if not done[b]:
            k = int(beam[b, j])
            attention = None if attention_rows is None else attention_rows[b, k].cpu()
            score = float(top_scores[b, j]) / divisor
            finished[b].append(Hypothesis(tokens[b, k, 1:].tolist(), score, attention))


def survivors(
    top_scores: torch.Tensor, beam: torch.Tensor, token: torch.Tensor, is_eos: torch.Tensor, K: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The K best of the 2K candidates (B, 2K) that do not end (EOS candidates sort after every
    other one) -> their scores (B, K) (-inf where only EOS was left), flat beam indices
    (B * K,), tokens (B, K)."""
    B = top_scores.shape[0]
    rank = is_eos.long() * (2 * K) + torch.arange(top_scores.shape[1], device=beam.device)
    keep = rank.argsort(dim=-1)[:, :K]  # (B, K)
    next_beam, next_token = beam.gather(1, keep), token.gather(1, keep)
    scores = top_scores.gather(1, keep).masked_fill(is_eos.gather(1, keep), float("-inf"))
    flat = (torch.arange(B, device=beam.device)[:, None] * K + next_beam).view(-1)  # (B * K,)
    return scores, flat, next_token


@torch.no_grad()
def beam_search(
    model: StepDecoder,
    src_ids: torch.Tensor,
    src_mask: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_len: int,
    beam_size: int = 5,
    alpha: float = 0.0,
    n_best: int = 1,
    banned_ids: tuple[int, ...] = (),
) -> list[list[Hypothesis]]:
    """Batched beam search; per sentence its `n_best` hypotheses, best first.

    Each step the 2K best continuations of the K live beams are ranked; an EOS among the first K
    finishes a hypothesis (scored by log-probability / length_penalty(its length, EOS
    included)), the best K others live on. A sentence is done when K hypotheses have finished;
    at `max_len` every live beam is made to end. With K = 1 this is greedy decoding.
    """
    B, K = src_ids.shape[0], beam_size
    device = src_ids.device
    state = select_state(
        model.start(src_ids, src_mask), torch.arange(B, device=device).repeat_interleave(K)
    )
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live beam per sentence at first: the others are copies of it
    tokens = torch.full((B, K, 1), bos_id, dtype=torch.long, device=device)
    attention_rows: torch.Tensor | None = None  # (B, K, t, S)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    for t in range(max_len):
        logits, state, attention = model.step(state, tokens[:, :, -1].reshape(-1))
        log_probs = ban(F.log_softmax(logits.float(), dim=-1), banned_ids)  # (B * K, V)
        V = log_probs.shape[-1]
        if t == max_len - 1:  # the last step: every beam ends here
            log_probs = only_eos(log_probs, eos_id)
        candidates = (scores[:, :, None] + log_probs.view(B, K, V)).view(B, K * V)
        top_scores, top_index = candidates.topk(min(2 * K, K * V), dim=-1)  # (B, 2K)
        beam, token = top_index // V, top_index % V  # (B, 2K)
        if attention is not None:
            step_rows = attention.view(B, K, 1, -1)  # (B, K, 1, S)
            attention_rows = (
                step_rows if attention_rows is None else torch.cat([attention_rows, step_rows], 2)
            )
        is_eos = token == eos_id
        penalty = length_penalty(t + 1, alpha)
        add_finished(finished, tokens, beam, top_scores, is_eos, attention_rows, penalty)
        if all(len(hyps) >= K for hyps in finished):
            break
        scores, flat, next_token = survivors(top_scores, beam, token, is_eos, K)
        state = select_state(state, flat)
        tokens = torch.cat([select_beams(tokens, flat), next_token[:, :, None]], 2)
        if attention_rows is not None:
            attention_rows = select_beams(attention_rows, flat)
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]
