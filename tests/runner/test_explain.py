"""`python -m attnexp.explain` on tiny trained runs: a bag run and a folder of runs end to end,
a Transformer matcher's rollout, and the refusals (no attention, an empty test split, a folder
that holds no run)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import TINY, run_counting_imports
from imdb_data import train_in_process
from lcqmc_data import write_lcqmc

from attnexp.cli.explain import main
from attnexp.errors import ConfigError
from attnexp.runner.explain import sampled_batches

SMALL = ("explain.n_examples=12", "explain.batch_size=6", "explain.ig_steps=4",
         "explain.permutations=3", "explain.erasure_steps=3", "explain.max_examples_shown=2")  # fmt: skip


def train(tmp: Path, name: str, *overrides: str) -> Path:
    """A tiny run trained in this process into tmp/runs/<name>."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    paths = [f"paths.log_dir={tmp}/outputs", f"paths.data_dir={tmp}/data"]
    with initialize_config_module("attnexp.conf", version_base="1.3"):
        cfg = compose(
            "train",
            return_hydra_config=True,
            overrides=[*paths, *overrides, "logger=csv", "trainer.accelerator=cpu"],
        )
    GlobalHydra.instance().clear()
    train_in_process(cfg, tmp / "runs" / name)
    return tmp / "runs" / name


@pytest.fixture(scope="module")
def bag_runs(tmp_path_factory) -> Path:
    """tmp/runs/attention (bag_attn, dot) and tmp/runs/mlp (no attention)."""
    tmp = tmp_path_factory.mktemp("explain")
    (tmp / "data").mkdir()
    train(tmp, "attention", "model=bag_attn", "scorer=dot", *TINY)
    train(tmp, "mlp", "model=bag_mlp", *TINY)
    return tmp


@pytest.fixture(autouse=True)
def same_torch_threads():
    """explain sets the torch threads, as a run does: put them back for the other tests."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def explain(capsys, tmp: Path, *args: str) -> tuple[int, str, str]:
    rc = main([f"paths.log_dir={tmp}/outputs", f"paths.data_dir={tmp}/data", *SMALL, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def explain_dir(out: str) -> Path:
    return Path(out.strip().splitlines()[-1].removeprefix("explain dir: "))


def test_a_bag_run_is_explained_against_its_ground_truth(bag_runs, capsys):
    rc, out, err = explain(capsys, bag_runs, f"ckpt_path={bag_runs / 'runs' / 'attention'}")
    assert rc == 0, err
    folder = explain_dir(out)
    assert folder.parent.name == "explains"
    found = json.loads((folder / "explain.json").read_text())
    assert found["run_dir"] == str((bag_runs / "runs" / "attention").resolve())
    assert set(found["sets"]) == {"test", "variable"}  # bags of 3, and of 1..2 (TINY)
    for name, one_set in found["sets"].items():
        summary, examples = one_set["summary"], one_set["examples"]
        assert summary["examples"] == len(examples["correct"]) == 12, name
        for key in ("attention", "gradient_x_input", "integrated_gradients", "random"):
            assert 0 <= summary["ground_truth"][key] <= 1
        tau = summary["rank_agreement"]["attention"]["integrated_gradients"]["kendall_tau"]
        assert tau["n"] + tau["not_applicable"] == 12
        assert set(summary["erasure"]) == {"attention", *found_methods(), "random"}
        assert 0 <= summary["permutation"]["flip_share"]["mean"] <= 1
    page = (folder / "explain.md").read_text()
    assert "Ground truth" in page and "![tau](tau_test.png)" in page
    for image in ("tau_test.png", "erasure_variable.png", "examples_test_attention.png"):
        assert (folder / image).stat().st_size > 0
    assert "top-attended digit is the label's in" in out


def found_methods() -> set[str]:
    return {"gradient_x_input", "integrated_gradients", "leave_one_out"}


def test_a_folder_of_runs_gets_one_table_and_leaves_out_the_model_without_attention(
    bag_runs, capsys
):
    rc, out, err = explain(capsys, bag_runs, f"ckpt_path={bag_runs / 'runs'}")
    assert rc == 0, err
    folder = explain_dir(out)
    page = (folder / "explain.md").read_text()
    assert "[attention](attention/explain.md)" in page and "truth att" in page
    assert "mlp" in page.split("## Left out")[1]
    assert (folder / "attention" / "explain.json").is_file()
    compared = json.loads((folder / "explain.json").read_text())
    assert set(compared["runs"]) == {"attention"} and "mlp" in compared["left_out"]
    assert "left out: mlp" in out


def test_a_model_without_attention_is_refused(bag_runs, capsys):
    rc, out, err = explain(capsys, bag_runs, f"ckpt_path={bag_runs / 'runs' / 'mlp'}")
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert "model=bag_mlp" in line and "no attention" in line


def test_an_empty_test_split_is_refused():
    run = SimpleNamespace(
        run_dir=Path("runs/x"), datamodule=SimpleNamespace(on_after_batch_transfer=None)
    )
    with pytest.raises(ConfigError, match="test split holds no examples"):
        sampled_batches(run, [], n_examples=5, batch_size=2, seed=0, name="test")


def test_a_folder_without_runs_is_refused_before_torch_loads(tmp_path):
    (tmp_path / "notes").mkdir()
    result, imported = run_counting_imports(
        ["-m", "attnexp.explain", f"ckpt_path={tmp_path / 'notes'}"], tmp_path
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "notes is not a run dir and holds no run" in line
    assert "torch" not in imported


def test_a_transformer_matcher_is_read_raw_and_rolled_out(tmp_path, capsys):
    write_lcqmc(tmp_path / "data", {"dev": 40, "test": 8})
    run = train(
        tmp_path, "pairs", "model=transformer", "model.num_heads=2", "model.hidden_size=16",
        "model.ffn_size=32", "data.train_split=dev", "data.max_seq_len=16", "data.batch_size=8",
        f"data.cache_dir={tmp_path}/cache", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
        "trainer.val_check_interval=1.0", "trainer.enable_progress_bar=false",
    )  # fmt: skip
    rc, out, err = explain(capsys, tmp_path, f"ckpt_path={run}", "explain.n_examples=8")
    assert rc == 0, err
    folder = explain_dir(out)
    summary = json.loads((folder / "explain.json").read_text())["sets"]["test"]["summary"]
    assert {"attention", "rollout", "head0", "head1"} <= set(summary["rank_agreement"])
    assert {"attention", "rollout"} <= set(summary["erasure"])
    assert "permutation" not in summary  # no pooling whose weights could be replaced
    assert "rollout" in (folder / "examples_test.html").read_text()


def test_a_model_without_attention_is_refused_from_its_config_before_torch_loads(bag_runs):
    result, imported = run_counting_imports(
        ["-m", "attnexp.explain", f"ckpt_path={bag_runs / 'runs' / 'mlp' / 'checkpoints'}"],
        bag_runs,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "model=bag_mlp" in line and "no attention" in line
    assert "torch" not in imported


@pytest.fixture(scope="module")
def translation_runs(tmp_path_factory) -> Path:
    """tmp/runs/seq2seq (additive) and tmp/runs/transformer, on the embedded fra-eng sample."""
    tmp = tmp_path_factory.mktemp("explain_translation")
    (tmp / "data").mkdir()
    tiny = ("data.source=sample", "data.val_sources=20", "data.test_sources=30",
            "data.batch_size=16", "data.val_bleu_sources=4", "decode.max_len=8",
            f"data.cache_dir={tmp}/cache", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
            "trainer.enable_progress_bar=false")  # fmt: skip
    train(tmp, "seq2seq", "model=seq2seq", "model.embed_dim=8", "model.hidden_size=8", *tiny)
    train(
        tmp, "transformer", "model=transformer_seq2seq", "model.hidden_size=8", "model.num_heads=2",
        "model.num_layers=2", "model.ffn_size=16", *tiny,
    )  # fmt: skip
    return tmp


def test_translation_runs_are_explained_per_target_token(translation_runs, capsys):
    rc, out, err = explain(
        capsys, translation_runs, f"ckpt_path={translation_runs / 'runs'}",
        "explain.n_examples=6", "explain.max_target_tokens=3",
    )  # fmt: skip
    assert rc == 0, err
    folder = explain_dir(out)
    assert "6 sentences" in out and "token accuracy" in out
    found = json.loads((folder / "seq2seq" / "explain.json").read_text())
    summary, pairs = found["sets"]["test"]["summary"], found["sets"]["test"]["examples"]
    assert summary["sentences"] == 6 and "teacher forcing" in summary["unit"]
    assert 6 <= summary["examples"] == len(pairs["step"]) <= 18
    assert max(pairs["sentence"]) == 5 and max(pairs["step"]) >= 1
    assert set(summary["rank_agreement"]) == {"attention"}
    assert set(summary["rank_agreement"]["attention"]) == found_methods()
    assert set(summary["erasure"]) == {"attention", *found_methods(), "random"}
    assert 0 <= summary["permutation"]["flip_share"]["mean"] <= 1  # one attention: replaced
    assert "accuracy_drop" in summary["uniform"]
    page = (folder / "seq2seq" / "explain.md").read_text()
    assert "teacher-forced token accuracy" in page and "The unit: one (sentence" in page
    assert "the reference" in (folder / "seq2seq" / "examples_test.html").read_text()
    stacked = json.loads((folder / "transformer" / "explain.json").read_text())
    summary = stacked["sets"]["test"]["summary"]
    assert {"attention", "head0", "head1", "layer1", "layer2"} == set(summary["rank_agreement"])
    assert "permutation" not in summary  # a cross-attention per layer: none replaced
    assert "[seq2seq](seq2seq/explain.md)" in (folder / "explain.md").read_text()
