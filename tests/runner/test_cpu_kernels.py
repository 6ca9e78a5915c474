"""A precision the CPU cannot run for the model is refused before training: both answers of the
probe, the probe against a real forward pass, and a run on a CPU capped to AVX2."""

import json

import pytest
import torch
from cli_helpers import run_cli
from torch import nn

from attnexp.errors import ConfigError
from attnexp.runner import cpu_kernels
from attnexp.runner.cpu_kernels import check_cpu_kernels, runs_in_bf16


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.out = nn.LSTM(4, 4), nn.Linear(4, 2)


@pytest.mark.parametrize("runs", [True, False], ids=["native-bf16", "no-bf16-lstm"])
def test_a_bf16_precision_is_refused_where_the_cpu_cannot_run_the_models_lstm(monkeypatch, runs):
    asked = []

    def probe(layer, mixed):
        asked.append((layer, mixed))
        return runs

    monkeypatch.setattr(cpu_kernels, "runs_in_bf16", probe)
    check_cpu_kernels("32-true", Recurrent(), "trainer.precision")  # fp32 runs everywhere
    check_cpu_kernels("bf16-mixed", nn.Linear(4, 2), "trainer.precision")  # nothing recurrent
    assert asked == []
    if runs:
        check_cpu_kernels("bf16-mixed", Recurrent(), "trainer.precision")
    else:
        capability = torch.backends.cpu.get_cpu_capability()
        with pytest.raises(ConfigError) as refused:
            check_cpu_kernels("bf16-mixed", Recurrent(), "trainer.precision")
        for said in ("trainer.precision=bf16-mixed", capability, "LSTM", "=32-true"):
            assert said in str(refused.value)
    assert asked == [(nn.LSTM, True)]


def test_the_probe_answers_as_a_forward_pass_does():
    """Whatever this CPU has: the probe says what an LSTM of another size does under autocast."""
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            nn.LSTM(3, 5, batch_first=True, bidirectional=True)(torch.randn(2, 6, 3))
        runs = True
    except RuntimeError:
        runs = False
    assert runs_in_bf16(nn.LSTM, mixed=True) is runs


def test_a_cpu_without_a_bf16_lstm_refuses_the_run_in_one_line(tmp_path, monkeypatch):
    """oneDNN capped to AVX2 (`ONEDNN_MAX_CPU_ISA`), as on a CPU without native bfloat16: a
    bf16-mixed LSTM run died at its first batch in oneDNN's traceback; it is refused before
    training, with what to set instead."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    result = run_cli(
        tmp_path, "model=lstm_attn", "data.source=sample", "data.max_seq_len=16",
        "model.embed_dim=8", "model.hidden_size=8", "trainer.max_epochs=1",
        "trainer.limit_train_batches=1", "trainer.limit_val_batches=1",
        "trainer.enable_progress_bar=false", "trainer.precision=bf16-mixed",
    )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "primitive descriptor" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "trainer.precision=bf16-mixed" in line and "trainer.precision=32-true" in line
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["history"] == [] and not (run_dir / "checkpoints").exists()  # nothing trained
