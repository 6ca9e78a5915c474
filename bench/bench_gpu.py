"""Training speed of each workload, today's setup beside the new one, in one process.

    python bench/bench_gpu.py --device cuda --out gpu.json --table gpu.md   # bench/run_gpu.sh
    python bench/bench_gpu.py --device cpu --steps 3 --warmup 1             # a smoke run

Workloads (fp32, the sizes of docs/benchmarks.md's H100 table): IMDB BiLSTM + dot attention, batch
128, reviews cut at 256 tokens (the embedded sample's length-bucketed batches, cycled: the same
length distribution as the full set); bags of 3 MNIST digits, batch 128 (BagAttention, hidden
256); LCQMC Transformer matcher (hidden 256, 4 heads, FFN 1024, depth 2, batch 32, AdamW with the
linear warmup schedule; generated pairs, or `--data-dir`'s lcqmc/dev.tsv).

Each workload is trained three ways:
- runner: Lightning Trainer + ClassificationTask, as a run trains (no logger or checkpoint);
- plain: the same model, data and optimizer in a bare PyTorch loop;
- floor: the least the GPU can be asked to do for that step: for IMDB a cuDNN-only loop
  (embedding, bidirectional nn.LSTM on the padded batch, mean, linear, fused Adam) over batches
  staged on the device beforehand; for bags and LCQMC the plain step captured once as a CUDA graph
  and replayed on a static batch. (On CPU: the plain step over staged batches.)
and in two setups where the change is a switch: `today` (packed LSTM, foreach Adam, bags drawn on
the host and copied) and `new` (padded LSTM, fused Adam, bags drawn on the device), plus `compile`
(new + trainer.compile=reduce-overhead) for the bags, measured last (its compile is slow).
Reported per case: samples/s and ms a step (median of `--rounds`), the GPU busy share (kernel
time per step from torch.profiler / wall time per step) and, for the plain loops, the host syncs
per step (torch.cuda.set_sync_debug_mode).
"""

import argparse
import contextlib
import functools
import json
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import benchkit
import torch
import torch.nn.functional as F
from bench_lcqmc import generated_data
from torch import nn
from torch.utils.data import DataLoader

from attnexp.data.bag_mnist import BagMNISTDataModule
from attnexp.data.batching import pad_sequences
from attnexp.data.imdb import IMDBDataModule
from attnexp.data.lcqmc import LCQMCDataModule
from attnexp.data.text import PAD_ID, encode_texts, train_word_tokenizer
from attnexp.models.bag import BagAttention
from attnexp.models.lstm import LSTMAttention
from attnexp.models.transformer import TransformerMatcher
from attnexp.modules import AdditiveScorer, DotScorer
from attnexp.tasks import ClassificationTask
from attnexp.tasks.classification import split_batch
from attnexp.tasks.compile import CompileNetwork
from attnexp.tasks.optim import linear_warmup_decay, param_groups

UNITS = {"imdb": "reviews/s", "bags": "bags/s", "lcqmc": "pairs/s"}
# What each setup switches (the runner reads the same switches from the config).
SETUPS = {
    "today": {"rnn_impl": "packed", "fused": False, "on_device": False, "compile": None},
    "new": {"rnn_impl": "reversed", "fused": None, "on_device": True, "compile": None},
    "compile": {"rnn_impl": "reversed", "fused": None, "on_device": True,
                "compile": "reduce-overhead"},
}  # fmt: skip


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# --- workloads: a model factory, an optimizer factory and batches --------------------------------


class Workload:
    """name, unit, `model(setup)`, `optimizer(setup)` (a factory of param groups, as the task
    takes it), `scheduler`, and `batches(setup, count)`: an iterator of host or device batches."""

    scheduler = None

    def prepare(self, batch: dict, device: str) -> dict:
        return benchkit.to_device(batch, device)


class IMDB(Workload):
    """The embedded sample's 1,600 training reviews, tokenized as a run does and batched as its
    loader does (sorted by length within pools of batches, shuffled), without the `datasets`
    token-id cache: the bench needs no `datasets`."""

    name = "imdb"

    def __init__(self, args) -> None:
        texts = IMDBDataModule(data_dir="/nonexistent", source="sample").load_sample()["train"]
        tokenizer = train_word_tokenizer(texts["text"], vocab_size=30000, min_frequency=2)
        ids = encode_texts(tokenizer, texts["text"], 256)
        self.vocab_size = tokenizer.get_vocab_size()
        order = torch.randperm(len(ids), generator=torch.Generator().manual_seed(0)).tolist()
        pool = 128 * 8  # the loader's length buckets: sorted within pools of 8 batches
        batches = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start : start + pool], key=lambda i: len(ids[i]))
            batches += [chunk[i : i + 128] for i in range(0, len(chunk), 128)]
        self.host_batches = [padded([ids[i] for i in b], [texts["label"][i] for i in b])
                             for b in batches if len(b) == 128]  # fmt: skip

    def model(self, setup: dict) -> nn.Module:
        torch.manual_seed(0)
        return LSTMAttention(
            self.vocab_size, 2, scorer=DotScorer, embed_dim=128, hidden_size=128,
            rnn_impl=setup["rnn_impl"],
        )  # fmt: skip

    def optimizer(self, setup: dict):
        return adam(setup, lr=1e-3)

    def batches(self, setup: dict, count: int, device: str) -> list[dict]:
        return cycled(self.host_batches, count)


class Bags(Workload):
    name = "bags"

    def __init__(self, args) -> None:
        self.data_dir = args.data_dir or "/nonexistent"

    def datamodule(self, setup: dict, count: int) -> BagMNISTDataModule:
        dm = BagMNISTDataModule(
            self.data_dir, bag_size=3, batch_size=128, num_train_bags=128 * count,
            on_device=setup["on_device"],
        )  # fmt: skip
        dm.setup("fit")
        self.source = dm.source
        return dm

    def model(self, setup: dict) -> nn.Module:
        torch.manual_seed(0)
        return BagAttention(
            10, image_size=28, hidden_size=256, attention="context", scorer=AdditiveScorer,
            pooled_norm=None,
        )  # fmt: skip

    def optimizer(self, setup: dict):
        return adam(setup, lr=1e-3)

    def batches(self, setup: dict, count: int, device: str) -> Iterator[dict]:
        dm = self.datamodule(setup, count)
        # the loaders read where the trainer trains; the plain loop has none: this stands in
        dm.trainer = SimpleNamespace(
            strategy=SimpleNamespace(root_device=torch.device(device)), overfit_batches=0,
            world_size=1, global_rank=0, lightning_module=None,
        )  # fmt: skip
        self.dm = dm
        return iter(dm.train_dataloader())

    def prepare(self, batch: dict, device: str) -> dict:
        return self.dm.on_after_batch_transfer(benchkit.to_device(batch, device), 0)


class LCQMC(Workload):
    name = "lcqmc"

    def __init__(self, args) -> None:
        folder = (
            Path(args.data_dir)
            if args.data_dir and (Path(args.data_dir) / "lcqmc" / "dev.tsv").exists()
            else generated_data(Path(tempfile.mkdtemp()))
        )
        self.source = (
            "LCQMC dev" if folder == Path(args.data_dir or "/nonexistent") else "generated"
        )
        dm = LCQMCDataModule(str(folder), train_split="dev", batch_size=32, cache_dir=None)
        dm.setup()
        self.kwargs = {
            **dm.model_kwargs, "hidden_size": 256, "num_heads": 4, "ffn_size": 1024, "num_layers": 2,
        }  # fmt: skip
        self.host_batches = list(dm.train_dataloader())
        self.scheduler = linear_warmup_decay

    def model(self, setup: dict) -> nn.Module:
        torch.manual_seed(0)
        return TransformerMatcher(**self.kwargs)

    def optimizer(self, setup: dict):
        fused = {} if setup["fused"] is None else {"fused": setup["fused"]}
        return functools.partial(torch.optim.AdamW, lr=5e-4, **fused)

    def batches(self, setup: dict, count: int, device: str) -> list[dict]:
        return cycled(self.host_batches, count)


def padded(ids: list[list[int]], labels: list[int]) -> dict:
    input_ids, mask = pad_sequences(ids, PAD_ID)
    return {"input_ids": input_ids, "mask": mask, "labels": torch.tensor(labels)}


def adam(setup: dict, lr: float):
    """Adam as the config builds it: fused on CUDA unless `fused` is set (today: False)."""
    fused = {} if setup["fused"] is None else {"fused": setup["fused"]}
    return functools.partial(torch.optim.Adam, lr=lr, **fused)


def cycled(batches: list[dict], count: int) -> list[dict]:
    return [batches[i % len(batches)] for i in range(count)]


# --- the three ways ------------------------------------------------------------------------------


def runner(work: Workload, setup: dict, args, profile: bool = False) -> dict:
    """Samples/s of the timed window of one fit (and the kernel time per step if `profile`)."""
    count = args.warmup + args.steps
    model = work.model(setup)
    weight_decay = 0.01 if work.name == "lcqmc" else 0.0
    task = ClassificationTask(model, 2 if work.name != "bags" else 10, work.optimizer(setup),
                              work.scheduler, weight_decay=weight_decay)  # fmt: skip
    timer = benchkit.WindowTimer(args.warmup)
    callbacks = [timer] + ([CompileNetwork(setup["compile"])] if setup["compile"] else [])
    profiler = KernelTime(args.device, args.warmup, args.warmup + args.steps) if profile else None
    callbacks += [profiler] if profiler else []
    trainer = benchkit.bench_trainer(
        timer, callbacks=callbacks, limit_train_batches=count, accelerator=args.device,
        devices=1,
    )  # fmt: skip
    if work.name == "bags":
        dm = work.datamodule(setup, count)
        trainer.fit(task, datamodule=dm)
    else:
        loader = DataLoader(work.batches(setup, count, args.device), batch_size=None)
        trainer.fit(task, train_dataloaders=loader)
    result = {"per_s": timer.rate, "steps": timer.samples}
    if profiler:
        result["kernel_ms_per_step"] = profiler.per_step_ms()
    return result


def plain(work: Workload, setup: dict, args, profile: bool = False) -> dict:
    model = work.model(setup).to(args.device).train()
    optimizer = work.optimizer(setup)(param_groups(model, 0.01 if work.name == "lcqmc" else 0))
    scheduler = work.scheduler(optimizer, args.warmup + args.steps) if work.scheduler else None
    if setup["compile"]:
        model.compile(mode=setup["compile"])
    batches = work.batches(setup, args.warmup + args.steps + 4, args.device)
    steps = iter(batches)

    def step() -> int:
        batch = work.prepare(next(steps), args.device)
        inputs, labels = split_batch(batch)
        loss = F.cross_entropy(model(**inputs).logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        return len(labels)

    return timed(step, args, profile, count_syncs=True)


def floor(work: Workload, setup: dict, args, profile: bool = False) -> dict:
    """The fewest launches for the step: a CUDA graph replayed (bags, LCQMC) or a cuDNN-only
    LSTM loop (IMDB), over batches already on the device."""
    if work.name == "imdb":
        return cudnn_lstm_floor(work, args, profile)
    model = work.model(setup).to(args.device).train()
    cuda = args.device == "cuda"
    lr = torch.tensor(1e-3, device=args.device) if cuda else 1e-3
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=cuda, capturable=cuda)
    batches = work.batches(setup, 8, args.device)
    # the most frequent shape: one static batch
    static = work.prepare(next(iter(batches)), args.device)
    inputs, labels = split_batch(static)

    def eager() -> None:
        loss = F.cross_entropy(model(**inputs).logits, labels)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()

    if not cuda:

        def step() -> int:
            eager()
            return len(labels)

        return timed(step, args, profile)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up on a side stream before capture, as torch's docs do
            eager()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        eager()

    def replay() -> int:
        graph.replay()
        return len(labels)

    return timed(replay, args, profile)


class BiLSTMFloor(nn.Module):
    """Embedding -> bidirectional cuDNN LSTM on the padded batch -> mean -> linear."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, 128)
        self.lstm = nn.LSTM(128, 128, batch_first=True, bidirectional=True)
        self.head = nn.Linear(256, 2)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(input_ids))
        return self.head(out.mean(dim=1))


def cudnn_lstm_floor(work: IMDB, args, profile: bool) -> dict:
    torch.manual_seed(0)
    model = BiLSTMFloor(work.vocab_size).to(args.device).train()
    cuda = args.device == "cuda"
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=cuda)
    staged = [benchkit.to_device(b, args.device) for b in work.host_batches]
    count = [0]

    def step() -> int:
        batch = staged[count[0] % len(staged)]
        count[0] += 1
        loss = F.cross_entropy(model(batch["input_ids"]), batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return len(batch["labels"])

    return timed(step, args, profile)


# --- timing, kernel time, syncs ------------------------------------------------------------------


def timed(step: Callable[[], int], args, profile: bool, count_syncs: bool = False) -> dict:
    for _ in range(args.warmup):
        step()
    sync(args.device)
    start, samples = time.perf_counter(), 0
    for _ in range(args.steps):
        samples += step()
    sync(args.device)
    result = {"per_s": samples / (time.perf_counter() - start), "steps": args.steps}
    if profile and args.device == "cuda":
        profiler = KernelTime(args.device, 0, 2)
        profiler.start()
        for _ in range(2):
            step()
        profiler.stop()
        result["kernel_ms_per_step"] = profiler.per_step_ms()
    if count_syncs and args.device == "cuda":
        result["syncs_per_step"] = syncs_per_step(step, 2)
    return result


def syncs_per_step(step: Callable[[], int], steps: int) -> float:
    """Host syncs torch reports (set_sync_debug_mode("warn")) over `steps` steps, per step."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught) / steps


class KernelTime(benchkit.pl.Callback):
    """GPU time of the kernels (and copies) run from batch `first` to batch `last` - 1, from
    torch.profiler's CUDA activity; also usable around a plain loop (start / stop)."""

    def __init__(self, device: str, first: int, last: int) -> None:
        self.device, self.first, self.last, self.profile = device, first, last, None

    def start(self) -> None:
        if self.device == "cuda":
            activities = [torch.profiler.ProfilerActivity.CUDA]
            self.profile = torch.profiler.profile(activities=activities)
            self.profile.start()

    def stop(self) -> None:
        if self.profile is not None:
            torch.cuda.synchronize()
            self.profile.stop()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == self.first:
            self.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == self.last - 1:
            self.stop()

    def per_step_ms(self) -> float | None:
        if self.profile is None:
            return None
        total_us = sum(
            event.time_range.elapsed_us()
            for event in self.profile.events()
            if event.device_type == torch.autograd.DeviceType.CUDA
        )
        return total_us / 1000 / (self.last - self.first) if total_us > 0 else None


# --- the table -----------------------------------------------------------------------------------

WAYS = {"runner": runner, "plain": plain, "floor": floor}


def cases(workloads: list[str], with_compile: bool) -> list[tuple[str, str, str]]:
    """(workload, way, setup), in the order they run: the cheap, most wanted ones first."""
    out = []
    for name in workloads:
        for way in ("runner", "plain"):
            for setup in ("today", "new"):
                out.append((name, way, setup))
    # then the floors: a failed graph capture cannot spoil the cases before it
    out += [(name, "floor", "new") for name in workloads]
    if with_compile and "bags" in workloads:  # last: its compile takes the longest
        out += [("bags", "runner", "compile"), ("bags", "plain", "compile")]
    return out


def measure(work: Workload, way: str, setup_name: str, args) -> dict:
    setup = SETUPS[setup_name]
    if setup["compile"]:  # one round, not profiled: each new model compiles anew (~1 min)
        args = argparse.Namespace(**{**vars(args), "rounds": 1, "profile": False})
    profile = args.device == "cuda" and args.profile
    # plain and floor profile a few steps after their timed window, in the last round; the
    # runner in a short fit of its own (inside its timed window it would slow it)
    rounds = [
        WAYS[way](work, setup, args, profile=profile and way != "runner" and i == args.rounds - 1)
        for i in range(args.rounds)
    ]
    per_s = statistics.median(r["per_s"] for r in rounds)
    row = {
        "workload": work.name, "way": way, "setup": setup_name, "per_s": round(per_s, 1),
        "unit": UNITS[work.name], "per_s_rounds": [round(r["per_s"], 1) for r in rounds],
    }  # fmt: skip
    batch = 128 if work.name != "lcqmc" else 32
    row["ms_per_step"] = round(1000 * batch / per_s, 3)
    if "syncs_per_step" in rounds[-1]:
        row["syncs_per_step"] = rounds[-1]["syncs_per_step"]
    if profile and way == "runner":
        short = argparse.Namespace(**{**vars(args), "steps": 5})
        rounds[-1]["kernel_ms_per_step"] = runner(work, setup, short, profile=True).get(
            "kernel_ms_per_step"
        )
    kernel = rounds[-1].get("kernel_ms_per_step")
    if kernel is not None:
        row["kernel_ms_per_step"] = round(kernel, 3)
        row["gpu_busy"] = round(kernel / row["ms_per_step"], 3)
    return row


def markdown(rows: list[dict], device: str) -> str:
    lines = [
        f"Training speed on {device} (fp32; median of the rounds; busy = kernel time / wall "
        "time per step; syncs = host syncs per step of the plain loop)",
        "",
        "| workload | way | setup | samples/s | ms/step | GPU busy | syncs/step |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['way']} | {r['setup']} | failed: "
                         f"{r['error'][:80]} | | | |")  # fmt: skip
            continue
        busy = f"{100 * r['gpu_busy']:.1f}%" if "gpu_busy" in r else ""
        lines.append(
            f"| {r['workload']} | {r['way']} | {r['setup']} | {r['per_s']:,.0f} {r['unit']} | "
            f"{r['ms_per_step']:.3f} | {busy} | {r.get('syncs_per_step', '')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--workloads", default="imdb,bags,lcqmc")
    parser.add_argument("--data-dir", default=None, help="folder holding mnist/ and lcqmc/")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--budget-s", type=float, default=None, help="skip cases past this")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=None, help="JSON results")
    parser.add_argument("--table", default=None, help="markdown table")
    args = parser.parse_args()
    benchkit.setup(args)
    started = time.perf_counter()
    builders = {"imdb": IMDB, "bags": Bags, "lcqmc": LCQMC}
    names = args.workloads.split(",")
    works = {}
    rows = []
    for name, way, setup in cases(names, args.compile):
        if args.budget_s and time.perf_counter() - started > args.budget_s:
            rows.append({"workload": name, "way": way, "setup": setup, "error": "skipped: budget"})
            continue
        try:
            if name not in works:
                works[name] = builders[name](args)
            row = measure(works[name], way, setup, args)
        except Exception as err:  # noqa: BLE001  one failed case must not cost the others
            row = {"workload": name, "way": way, "setup": setup, "error": repr(err)[:300]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    result = {
        "device": device, "torch": torch.__version__, "warmup": args.warmup,
        "steps": args.steps, "rounds": args.rounds, "rows": rows,
        "wall_s": round(time.perf_counter() - started, 1), "machine": args.machine,
    }  # fmt: skip
    table = markdown(rows, device)
    print(table)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if args.table:
        Path(args.table).write_text(table)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
