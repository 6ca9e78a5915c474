"""attnexp.runs.machine: the record of what computed a run."""

import os
import platform
import shutil
import subprocess

import pytest
import pytorch_lightning
import torch

from attnexp.runs import machine

INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
CPU implementer\t: 0x41

processor\t: 1
"""
# A 64-bit Raspberry Pi: no model name per processor; the board's name comes after them all.
RASPBERRY_PI = """processor\t: 0
BogoMIPS\t: 108.00
CPU implementer\t: 0x41

processor\t: 1
BogoMIPS\t: 108.00

Revision\t: c03111
Model\t\t: Raspberry Pi 4 Model B Rev 1.1
"""
# POWER: the machine's model number sits in a block after the processors', with no cpu family.
POWER = """processor\t: 0
cpu\t\t: POWER9, altivec supported

timebase\t: 512000000
model\t\t: 8335-GTH
"""


def test_cpu_model_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(INTEL)
    assert machine.cpu_model(cpuinfo) == (
        "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz (family 6, model 85)"
    )


def test_cpu_model_of_a_board_named_after_its_processors(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(RASPBERRY_PI)
    assert machine.cpu_model(cpuinfo) == "Raspberry Pi 4 Model B Rev 1.1"


@pytest.mark.parametrize(
    "text", [ARM, POWER, None], ids=["no model name", "no cpu family", "no cpuinfo"]
)
def test_cpu_model_without_a_name_in_cpuinfo_still_names_something(tmp_path, text):
    cpuinfo = tmp_path / "cpuinfo"
    if text is not None:
        cpuinfo.write_text(text)
    assert machine.cpu_model(cpuinfo).strip()


def test_describe_machine_names_what_the_numbers_depend_on():
    found = machine.describe_machine()
    assert found["torch"] == torch.__version__
    assert found["torch_threads"] == torch.get_num_threads()
    assert found["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert found["cpu_count"] == os.cpu_count()
    assert found["python"] == platform.python_version()
    assert found["lightning"] == pytorch_lightning.__version__
    assert found["commit"] == machine.source_commit()
    assert found["gpus"] == [
        torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
    ]


def git(folder, *args):
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_source_commit_clean_dirty_and_not_a_checkout(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    package = checkout / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (checkout / ".gitignore").write_text("outputs/\n")
    git(checkout, "init", "-q")
    git(checkout, "add", ".")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    monkeypatch.setattr(machine, "PACKAGE_DIR", package)
    assert machine.source_commit() == head
    (checkout / "outputs").mkdir()  # what runs write, ignored: still the commit's code
    (checkout / "outputs" / "metrics.json").write_text("{}")
    assert machine.source_commit() == head
    (package / "__init__.py").write_text("x = 1\n")
    assert machine.source_commit() == head + "+dirty"
    # an installed copy the checkout does not track (a .venv inside it) is not that commit's code
    installed = checkout / ".venv" / "site-packages" / "pkg"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    (checkout / ".gitignore").write_text("outputs/\n.venv/\n")
    monkeypatch.setattr(machine, "PACKAGE_DIR", installed)
    assert machine.source_commit() is None
    monkeypatch.setattr(machine, "PACKAGE_DIR", tmp_path / "elsewhere")
    assert machine.source_commit() is None


def test_machine_label():
    assert machine.machine_label(None) == "not recorded"
    assert machine.machine_label({}) == "not recorded"
    one = {"cpu": "X", "cpu_capability": "AVX2", "torch_threads": 1, "torch": "2.13.0", "gpus": []}
    assert machine.machine_label(one) == "X, AVX2, 1 torch thread, torch 2.13.0"
    two = {**one, "torch_threads": 2, "gpus": ["NVIDIA H100"]}
    assert machine.machine_label(two) == "X, AVX2, 2 torch threads, torch 2.13.0, NVIDIA H100"
    # the threads the run set (trainer.threads) after the machine was described
    assert machine.machine_label(two, torch_threads=1).startswith("X, AVX2, 1 torch thread,")
