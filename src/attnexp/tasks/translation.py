"""The LightningModule of the translation experiments (seq2seq, transformer_seq2seq).

Training: token cross-entropy (label smoothing optional) over the real target tokens, with the
model's teacher forcing; the token accuracy is counted on every `trainer.log_every_n_steps`-th
batch of an epoch, its first included (its argmax over the target vocabulary is a few percent of
a step). Validation: per-token loss, perplexity and
token accuracy (teacher forced), and BLEU of greedy translations of a fixed subset of sources.
Test: the same, the free-running loss and perplexity (`test/loss_free`, `test/ppl_free`: the
decoder fed its own argmax), plus sacrebleu BLEU (cased and lowercased) and chrF of greedy and
beam translations of every test source against all its references; the signatures go to
`results` (the run records them).
"""

import logging
import math
from collections.abc import Callable

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.trainer.states import TrainerFn
from torch import nn

from attnexp.data.translation_text import BOS_ID, EOS_ID, NEVER_EMITTED, words
from attnexp.errors import ConfigError, require_positive
from attnexp.modules.decoding import beam_search, free_running_logits, greedy_decode
from attnexp.tasks.optim import Optimized
from attnexp.tasks.random_state import per_rank
from attnexp.tasks.translation_metrics import d2l_bleu, sacrebleu_scores

log = logging.getLogger(__name__)
MODEL_INPUTS = ("src_ids", "src_mask", "tgt_in")
TRAIN_SUMS_KEY = "translation_train_sums"  # top-level key of a checkpoint: a list, one per rank


class TranslationTask(Optimized, pl.LightningModule):
    """Args:
    model: an encoder-decoder with forward(src_ids, src_mask, tgt_in) -> ModelOutput and the
        start/step interface of modules/decoding.py.
    num_classes: the target vocabulary size (from the DataModule; unused but checked).
    optimizer / scheduler / weight_decay: as ClassificationTask's.
    label_smoothing: of the training loss (validation and test report the plain NLL).
    beam_size, alpha, max_len: test decoding (beam_size 1: greedy only).
    probe_pairs: [source, reference] pairs translated greedily at test and scored with d2l's
        bigram BLEU (d2l's four sentences), logged as test/probe_bleu2_<i>.
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., object] | None = None,
        weight_decay: float = 0.0,
        label_smoothing: float = 0.0,
        beam_size: int = 5,
        alpha: float = 0.6,
        max_len: int = 50,
        probe_pairs: list[list[str]] | None = None,
        test_set_names: list[str] | tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        if getattr(model, "input_kind", None) != "translation":
            raise ConfigError(
                f"task=translation trains encoder-decoders, and {type(model).__name__} is not one "
                f"(set model=seq2seq or model=transformer_seq2seq)"
            )
        if not 0.0 <= label_smoothing < 1.0:
            raise ConfigError(
                f"task.label_smoothing={label_smoothing} must be in [0, 1) (set task.label_smoothing=...)"
            )
        require_positive("decode.beam_size", beam_size)
        require_positive("decode.max_len", max_len)
        if test_set_names:
            raise ConfigError(f"translation has no extra test sets, got {list(test_set_names)}")
        self.model, self.num_classes = model, num_classes
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.weight_decay, self.label_smoothing = weight_decay, label_smoothing
        self.beam_size, self.alpha, self.max_len = beam_size, alpha, max_len
        self.probe_pairs = [list(p) for p in probe_pairs or []]
        self.notes: list[str] = []
        self.results: dict = {}  # signatures and probe translations, for the run's record
        self._sums: dict[str, torch.Tensor] = {}
        self._train_sums_epoch: int | None = None  # the epoch whose batches the train sums hold
        self._hypotheses: dict[str, dict[int, str]] = {}

    def forward(self, **inputs: torch.Tensor):
        return self.model(**inputs)

    # ------------------------------------------------------------------ steps
    def _shared_step(self, batch: dict, stage: str, count_accuracy: bool = True) -> torch.Tensor:
        out = self.model(**{k: batch[k] for k in MODEL_INPUTS})
        logits, target, mask = out.logits, batch["tgt_out"], batch["tgt_mask"]  # (B, U, V), (B, U)
        # One log-softmax for the loss and the NLL: over a large target vocabulary a second
        # cross-entropy costs a tenth of a small model's step.
        log_probs = F.log_softmax(logits.float(), dim=-1)  # (B, U, V)
        nll = -log_probs.gather(-1, target[..., None]).squeeze(-1)  # (B, U)
        tokens = mask.sum()
        if stage == "train" and self.label_smoothing > 0:
            # F.cross_entropy's label smoothing: (1 - e) NLL + e * the mean over V of -log p
            smoothing = self.label_smoothing
            smooth = (1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1)  # (B, U)
            loss = (smooth * mask).sum() / tokens
        else:
            loss = (nll * mask).sum() / tokens
        self._add(stage, nll=(nll * mask).sum().detach(), tokens=tokens)
        if count_accuracy:
            correct = ((logits.argmax(-1) == target) & mask).sum()
            self._add(stage, correct=correct, counted=tokens)
        return loss

    def _take_sums(self, stage: str) -> dict[str, torch.Tensor]:
        """The sums `stage` has added up (by name), removed from the task."""
        keys = [k for k in self._sums if k.startswith(f"{stage}/")]
        return {k.split("/", 1)[1]: self._sums.pop(k) for k in keys}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # this epoch's train sums so far, per rank: a run resumed mid-epoch logs the train/* of
        # the whole epoch, as the uninterrupted run does
        sums = {k: v.cpu() for k, v in self._sums.items() if k.startswith("train/")}
        checkpoint[TRAIN_SUMS_KEY] = per_rank(self.trainer, sums)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self._trainer is None or self.trainer.state.fn != TrainerFn.FITTING:
            return  # loaded outside a fit (a test of the checkpoint): no epoch to continue
        self._take_sums("train")
        self._sums.update(checkpoint[TRAIN_SUMS_KEY][self.trainer.global_rank])
        self._train_sums_epoch = checkpoint["epoch"]

    def _free_running_step(self, batch: dict, stage: str) -> None:
        """The NLL of the reference when the decoder is fed its own argmax (teacher forcing 0,
        as bentrevett's `evaluate`): at every position up to the reference's length."""
        target, mask = batch["tgt_out"], batch["tgt_mask"]  # (B, U)
        logits = free_running_logits(
            self.model, batch["src_ids"], batch["src_mask"], BOS_ID, target.shape[1]
        )  # (B, U, V)
        nll = F.cross_entropy(logits.float().transpose(1, 2), target, reduction="none")  # (B, U)
        self._add(stage, nll_free=(nll * mask).sum())

    def _add(self, stage: str, **values: torch.Tensor) -> None:
        for name, value in values.items():
            key = f"{stage}/{name}"
            self._sums[key] = self._sums.get(key, 0) + value.detach().float()

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if self._train_sums_epoch != self.current_epoch:
            # A new epoch's sums start empty. on_train_epoch_end has taken them, except after a
            # resume from a checkpoint written at an epoch's last validation: Lightning then
            # counts that epoch as done without calling on_train_epoch_end.
            self._take_sums("train")
            self._train_sums_epoch = self.current_epoch
        # the epoch's batch index, not the global step: every epoch gets a train/acc, and a run
        # resumed mid-epoch counts the batches the uninterrupted one did
        sampled = batch_idx % self.trainer.log_every_n_steps == 0
        loss = self._shared_step(batch, "train", count_accuracy=sampled)
        self.log("train/loss_step", loss, prog_bar=True, batch_size=batch["tgt_in"].shape[0])
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._shared_step(batch, "val")
        self._translate(batch, "val", beam=False)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._shared_step(batch, "test")
        self._free_running_step(batch, "test")
        self._translate(batch, "test_greedy", beam=False)
        if self.beam_size > 1:
            self._translate(batch, "test_beam", beam=True)

    def _translate(self, batch: dict, key: str, beam: bool) -> None:
        """Translate the pairs flagged `decode` (one per source) and keep the detokenised text."""
        rows = batch["decode"].nonzero().flatten()
        if rows.numel() == 0:
            return
        src_ids, src_mask = batch["src_ids"][rows], batch["src_mask"][rows]
        hypotheses = self.translate(src_ids, src_mask, beam)
        datamodule = self.trainer.datamodule
        store = self._hypotheses.setdefault(key, {})
        for index, tokens in zip(batch["source_index"][rows].tolist(), hypotheses, strict=True):
            store[index] = datamodule.decode_target(tokens)

    def translate(
        self, src_ids: torch.Tensor, src_mask: torch.Tensor, beam: bool
    ) -> list[list[int]]:
        """Token ids of the best translation of each source (greedy, or beam search)."""
        if beam:
            best = beam_search(
                self.model,
                src_ids,
                src_mask,
                BOS_ID,
                EOS_ID,
                self.max_len,
                self.beam_size,
                self.alpha,
                banned_ids=NEVER_EMITTED,
            )
            return [hyps[0].tokens for hyps in best]
        return [
            h.tokens
            for h in greedy_decode(
                self.model, src_ids, src_mask, BOS_ID, EOS_ID, self.max_len, NEVER_EMITTED
            )
        ]

    # ------------------------------------------------------------------ epoch ends
    def _token_metrics(self, stage: str) -> dict[str, float]:
        sums = self._take_sums(stage)
        if not sums:
            return {}
        tokens = float(sums["tokens"])
        loss = float(sums["nll"]) / max(tokens, 1.0)
        metrics = {f"{stage}/loss": loss}
        if "counted" in sums:
            metrics[f"{stage}/acc"] = float(sums["correct"]) / max(float(sums["counted"]), 1.0)
        if stage != "train":
            metrics[f"{stage}/ppl"] = math.exp(min(loss, 50.0))
        if "nll_free" in sums:
            loss_free = float(sums["nll_free"]) / max(tokens, 1.0)
            metrics[f"{stage}/loss_free"] = loss_free
            metrics[f"{stage}/ppl_free"] = math.exp(min(loss_free, 50.0))
        return metrics

    def _scores(self, key: str, stage: str) -> dict[str, float | str]:
        found = self._hypotheses.pop(key, {})
        if not found:
            return {}
        references = self.trainer.datamodule.references(stage)
        order = sorted(found)
        return sacrebleu_scores([found[i] for i in order], [references[i] for i in order])

    def on_train_epoch_end(self) -> None:
        metrics = self._token_metrics("train")
        if metrics:
            self.log_dict(metrics, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        metrics = self._token_metrics("val")
        scores = self._scores("val", "val")
        if scores:
            metrics["val/bleu"] = scores["bleu"]
        if metrics:
            self.log_dict(metrics, prog_bar=True, sync_dist=True)

    def on_test_epoch_end(self) -> None:
        metrics = self._token_metrics("test")
        for decoding in ("greedy", "beam"):
            scores = self._scores(f"test_{decoding}", "test")
            for name in ("bleu", "bleu_lc", "chrf"):
                if name in scores:
                    metrics[f"test/{name}_{decoding}"] = scores[name]
            signatures = {k: v for k, v in scores.items() if k.startswith("signature")}
            self.results.update(signatures)
        main = "beam" if self.beam_size > 1 else "greedy"
        for name in ("bleu", "bleu_lc", "chrf"):
            if f"test/{name}_{main}" in metrics:
                metrics[f"test/{name}"] = metrics[f"test/{name}_{main}"]
        metrics.update(self._probe_scores())
        if metrics:
            self.log_dict(metrics, sync_dist=True)

    def _probe_scores(self) -> dict[str, float]:
        """d2l's showcase: translate its sentences, score each with the bigram BLEU it uses."""
        if not self.probe_pairs:
            return {}
        datamodule = self.trainer.datamodule
        batch = datamodule.encode([source for source, _ in self.probe_pairs])
        batch = {k: v.to(self.device) for k, v in batch.items()}
        hypotheses = self.translate(batch["src_ids"], batch["src_mask"], beam=False)
        metrics, shown = {}, []
        for i, ((source, reference), tokens) in enumerate(
            zip(self.probe_pairs, hypotheses, strict=True)
        ):
            text = datamodule.decode_target(tokens)
            score = d2l_bleu(" ".join(words(text.lower())), " ".join(words(reference.lower())), k=2)
            metrics[f"test/probe_bleu2_{i}"] = score
            shown.append(
                {"source": source, "translation": text, "reference": reference, "bleu2": score}
            )
            log.info("%s => %s, bleu %.3f", source, text, score)
        self.results["probe_translations"] = shown
        return metrics
