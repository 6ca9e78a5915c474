"""Every yaml under conf/ composes and builds; every model trains one batch (fast_dev_run) and
ignores what padded positions hold.

Configs are found by globbing, so a new option (a model, a scorer, an experiment) is covered
without a new test. Every dataset gets tiny generated files in one data dir.
"""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import MissingConfigException
from hydra.utils import get_class
from imdb_data import train_in_process, write_imdb
from lcqmc_data import write_lcqmc
from mnist_data import write_mnist
from omegaconf import OmegaConf
from translation_data import write_fra_eng, write_multi30k

from attnexp.runner.build import build

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
SKIP_GROUPS = {"hydra"}  # Hydra's own settings; used by every run anyway


def group_options() -> list[str]:
    """`group=option` for every option; nested groups (not in the defaults list) get a `+`."""
    overrides = []
    for path in sorted(CONF_DIR.glob("*/**/*.yaml")):
        group = path.parent.relative_to(CONF_DIR).as_posix()
        if group.split("/")[0] in SKIP_GROUPS:
            continue
        prefix = "+" if "/" in group else ""
        overrides.append(f"{prefix}{group}={path.stem}")
    return overrides


def target_of(path: Path) -> type:
    """The class an option's yaml builds (its own `_target_`, or that of the option it extends)."""
    config = yaml.safe_load(path.read_text())
    if "_target_" not in config:
        (base,) = [entry for entry in config.get("defaults", []) if isinstance(entry, str)]
        return target_of(path.parent / f"{base}.yaml")
    return get_class(config["_target_"])


def group_choices_of_model(group: str, conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """model option -> the option of `group` its yaml selects (`override /<group>...: <option>`)."""
    pairs = {}
    for path in sorted((conf_dir / "model").glob("*.yaml")):
        for entry in yaml.safe_load(path.read_text()).get("defaults", []):
            if isinstance(entry, dict):
                for key, value in entry.items():
                    if key.split("@")[0].split()[-1] == f"/{group}":
                        pairs[path.stem] = value
    return pairs


def data_of_model(conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """model option -> the data option its yaml selects."""
    return group_choices_of_model("data", conf_dir)


def model_for_recipe() -> dict[str, str]:
    """recipe option -> a model whose yaml selects it (a recipe sets keys of its model's data)."""
    pairs = {}
    for model, recipe in group_choices_of_model("recipe").items():
        pairs.setdefault(recipe, model)
    return pairs


def model_for_data(conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """data option -> a model that fits it: one whose yaml selects it, else (a dataset for the
    existing models, run as data=<it>) one that reads the batch kind its DataModule provides."""
    pairs = {}
    for model, data in data_of_model(conf_dir).items():
        pairs.setdefault(data, model)
    by_kind = {}
    for path in sorted((conf_dir / "model").glob("*.yaml")):
        by_kind.setdefault(getattr(target_of(path), "input_kind", None), path.stem)
    for path in sorted((conf_dir / "data").glob("*.yaml")):
        kind = target_of(path).input_kind
        if path.stem not in pairs and kind in by_kind:
            pairs[path.stem] = by_kind[kind]
    return pairs


MODELS = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
# Translation models read (source, target) batches and return (B, U, V) logits: their padding and
# fast_dev_run checks are in tests/models/test_seq2seq.py and tests/tasks/test_translation_task.py.
CLASSIFIERS = [
    m for m in MODELS if target_of(CONF_DIR / "model" / f"{m}.yaml").input_kind != "translation"
]
BAG_MODELS = sorted(m for m, data in data_of_model().items() if data == "bag_mnist")


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("root")
    data = root / "data"
    write_mnist(data, num_train=120, num_test=60)
    write_imdb(data, num_train=48, num_test=16)
    write_lcqmc(data, splits={"train": 48, "dev": 24, "test": 16})
    write_fra_eng(data, num_pairs=5000)  # the default split holds out 3,000 distinct sources
    write_multi30k(data)
    monkeypatch_module.setenv("ATTNEXP_CACHE", str(root / "cache"))
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def compose_in(root: Path, *overrides: str):
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module("attnexp.conf", version_base="1.3"):
            return compose(
                "train",
                overrides=[
                    f"paths.root_dir={root}",
                    f"paths.log_dir={root}/outputs",
                    f"paths.data_dir={root}/data",
                    *overrides,
                ],
                return_hydra_config=True,
            )
    finally:
        GlobalHydra.instance().clear()


def test_globbing_finds_the_configs():
    options = group_options()
    assert {
        "model=bag_attn",
        "model=bag_mlp",
        "scorer=dot",
        "data=bag_mnist",
        "trainer=cpu",
    } <= set(options)
    assert model_for_data()["bag_mnist"] in ("bag_attn", "bag_mlp")
    assert {"bag_attn", "bag_mlp"} <= set(BAG_MODELS)


def test_a_dataset_no_model_selects_pairs_by_batch_kind(tmp_path):
    """A new dataset for the existing models (`data=<it>`, no model yaml of its own) is still
    composed and built by test_every_option_composes_and_builds: with a model of its batch kind."""
    for group in ("model", "data"):
        (tmp_path / group).mkdir()
        for path in (CONF_DIR / group).glob("*.yaml"):
            (tmp_path / group / path.name).write_text(path.read_text())
    (tmp_path / "data" / "reviews2.yaml").write_text("_target_: attnexp.data.imdb.IMDBDataModule\n")
    model = model_for_data(tmp_path)["reviews2"]
    assert target_of(tmp_path / "model" / f"{model}.yaml").input_kind == "tokens"


def test_every_conf_folder_is_a_listed_package():
    """A new conf/ folder must join pyproject's `packages`, or a non-editable install warns (and
    future setuptools would leave its yaml files out)."""
    tomllib = pytest.importorskip("tomllib")
    root = CONF_DIR.parent
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        ".".join(("attnexp.conf", *path.relative_to(CONF_DIR).parts))
        for path in CONF_DIR.rglob("*")
        if path.is_dir() and not path.name.startswith((".", "__"))
    }
    assert folders - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


@pytest.mark.e2e
def test_a_wheel_ships_every_yaml_and_sample_and_composes_from_them(tmp_path):
    """`pip install .` (not editable): the wheel holds conf/ as attnexp.conf and the samples, and
    Hydra finds the configs in the installed package, with no checkout in sight."""
    root, source = CONF_DIR.parent, tmp_path / "source"
    ignore = shutil.ignore_patterns("*.egg-info", "__pycache__", "conf")  # src/attnexp/conf: a link
    shutil.copytree(root / "src", source / "src", ignore=ignore)
    shutil.copytree(CONF_DIR, source / "conf")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("attnexp-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
        shipped = set(archive.namelist())
    yamls = {f"attnexp/conf/{p.relative_to(CONF_DIR).as_posix()}" for p in CONF_DIR.rglob("*.yaml")}
    assert yamls - shipped == set()
    assert {f"attnexp/data/samples/{n}" for n in ("mnist_sample.npz", "imdb_sample.parquet")} <= (
        shipped
    )
    script = (
        "import attnexp, hydra\n"
        "with hydra.initialize_config_module('attnexp.conf', version_base='1.3'):\n"
        "    cfg = hydra.compose('train', overrides=['experiment=imdb/chapter_dot'])\n"
        "print(attnexp.__file__, cfg.model._target_, cfg.scorer._target_)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    where, model, scorer = result.stdout.split()
    assert Path(where).is_relative_to(tmp_path / "site")
    assert (model, scorer) == (
        "attnexp.models.lstm.LSTMAttention",
        "attnexp.modules.scorers.DotScorer",
    )


@pytest.mark.parametrize("override", group_options())
def test_every_option_composes_and_builds(tiny_root, override):
    extra = []
    if override.startswith("data="):
        data = override.split("=", 1)[1]
        assert data in model_for_data(), f"no model reads the batches of data={data}"
        extra.append(f"model={model_for_data()[data]}")
    if override == "task=translation":  # the default model is a classifier
        extra.append("model=seq2seq")
    if override.startswith("recipe="):
        recipe = override.split("=", 1)[1]
        if recipe in model_for_recipe():
            extra.append(f"model={model_for_recipe()[recipe]}")
    try:
        cfg = compose_in(tiny_root, *extra, override)
    except MissingConfigException as err:  # e.g. hparams_search=*optuna without the Optuna plugin
        if "hydra/sweeper" in str(err) or "hydra/launcher" in str(err):
            pytest.skip(f"{override}: Hydra plugin not installed")
        raise
    OmegaConf.to_container(cfg.model, resolve=True)  # every interpolation resolves
    OmegaConf.to_container(cfg.data, resolve=True)
    choices = dict(cfg.hydra.runtime.choices)
    datamodule, task = build(cfg, choices)
    assert datamodule.source == "local"
    assert sum(p.numel() for p in task.model.parameters()) > 0


def with_padding_filled(inputs: dict, fill_seed: int) -> dict:
    """The batch with other content at its padded positions: random features where they are
    floats (large: an untrained model that reads them changes visibly, checked by breaking
    masked_mean), random ids from the batch's range where they are integers (tokens, segments)."""
    mask, generator = inputs["mask"], torch.Generator().manual_seed(fill_seed)
    filled = {}
    for key, value in inputs.items():
        if key != "mask" and torch.is_tensor(value) and value.shape[:2] == mask.shape:
            if value.is_floating_point():
                noise = 1e3 * torch.randn(value.shape, generator=generator, dtype=value.dtype)
            else:
                high = int(value.max()) + 1
                noise = torch.randint(0, high, value.shape, generator=generator, dtype=value.dtype)
            pad = (~mask).view(*mask.shape, *[1] * (value.dim() - 2))
            value = torch.where(pad, noise, value)
        filled[key] = value
    return filled


@pytest.mark.parametrize("model", CLASSIFIERS)
def test_every_model_ignores_padded_content(tiny_root, model):
    """What padded positions hold changes no logit, and (B, T) attention weights leave them out.
    Every batch gets padding here: the last position of each row is masked off (rows stay a run
    of real items, as the text encoders expect)."""
    cfg = compose_in(tiny_root, f"model={model}", "data.batch_size=8")
    datamodule, task = build(cfg, dict(cfg.hydra.runtime.choices))
    batch = datamodule.on_after_batch_transfer(next(iter(datamodule.val_dataloader())), 0)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    inputs["mask"] = inputs["mask"].clone()
    inputs["mask"][:, -1] = False
    assert inputs["mask"].sum(-1).min() >= 1, "a row would be all padding"
    torch.manual_seed(0)
    net = task.model.eval()
    with torch.no_grad():
        output = net(**with_padding_filled(inputs, 0), return_attention=True)
        logits, attention = output.logits, output.attention
        assert torch.allclose(net(**with_padding_filled(inputs, 1)).logits, logits, atol=1e-5)
    if torch.is_tensor(attention) and attention.shape == inputs["mask"].shape:
        assert (attention[~inputs["mask"]] == 0).all()


ON_GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")]


@pytest.mark.parametrize("trainer", ["default", pytest.param("gpu", marks=ON_GPU)])  # gpu: bf16
@pytest.mark.parametrize("model", CLASSIFIERS)
def test_every_model_fast_dev_run(tiny_root, tmp_path, model, trainer):
    cfg = compose_in(
        tiny_root,
        f"model={model}",
        f"trainer={trainer}",
        "debug=fdr",
        "data.batch_size=8",
        "trainer.enable_progress_bar=false",
        "logger=csv",
        *(["trainer.accelerator=gpu"] if trainer == "gpu" else []),  # debug=fdr picks the CPU
    )
    metrics = train_in_process(cfg, tmp_path / "run")
    assert "test/acc" in metrics and 0.0 <= metrics["test/acc"] <= 1.0
    record = yaml.safe_load((tmp_path / "run" / "metrics.json").read_text())
    assert record["status"] == "completed" and record["data_source"] == "local"
    assert record["device"].startswith("cuda" if trainer == "gpu" else "cpu")


@pytest.mark.parametrize("model", BAG_MODELS)
def test_bag_models_train_in_bf16_true(tiny_root, tmp_path, model):
    """The bag images reach the model in its own dtype (here bfloat16), not float32."""
    cfg = compose_in(
        tiny_root,
        f"model={model}",
        "trainer.precision=bf16-true",
        "debug=fdr",
        "data.batch_size=8",
        "trainer.enable_progress_bar=false",
        "logger=csv",
    )
    metrics = train_in_process(cfg, tmp_path / "run")
    assert 0.0 <= metrics["test/acc"] <= 1.0


def test_debug_overfit_fits_a_few_bag_batches(tiny_root, tmp_path):
    """debug=overfit replaces the training sampler: the bags still load, and the same 3 batches
    are learnt by heart (measured: train acc 1.0 from epoch ~15 on)."""
    cfg = compose_in(
        tiny_root,
        "model=bag_attn",
        "debug=overfit",
        "trainer.max_epochs=25",
        "data.batch_size=16",
        "model.hidden_size=32",
        "trainer.enable_progress_bar=false",
        "logger=csv",
    )
    train_in_process(cfg, tmp_path / "run")
    record = yaml.safe_load((tmp_path / "run" / "metrics.json").read_text())
    assert record["status"] == "completed" and record["history"][-1]["train/acc"] >= 0.95


@pytest.mark.parametrize(
    "row, model, scorer",
    [
        ("mean", "lstm_mean", None),
        ("additive", "lstm_attn", "additive"),
        ("dot", "lstm_attn", "dot"),
        ("mhsa", "lstm_mhsa", None),
    ],
)
def test_the_imdb_chapter_rows_set_the_chapters_settings(compose_cfg, row, model, scorer):
    """experiment=imdb/chapter_<row>: the model and scorer of the row, the chapter's settings
    (sizes, optimiser, budget, Paddle's initialisers, 10-step checks) and the chapter port's
    split (dev = half of the test set); `data=imdb` alone gives the dev set carved from train."""
    cfg = compose_cfg(f"experiment=imdb/chapter_{row}")
    choices = cfg.hydra.runtime.choices
    assert (choices.model, choices.data) == (model, "imdb_dev_from_test")
    assert cfg.get("scorer") is None if scorer is None else choices.scorer == scorer
    assert (cfg.model.embed_dim, cfg.model.hidden_size, cfg.model.num_layers) == (128, 128, 1)
    assert (cfg.model.embed_init, cfg.model.linear_init) == ("xavier", "xavier")
    assert (cfg.model.dropout, cfg.model.embed_dropout) == (0.0, 0.0)
    assert (cfg.data.batch_size, cfg.data.max_seq_len) == (128, 256)
    assert (cfg.optimizer.lr, cfg.trainer.max_epochs, cfg.trainer.val_check_interval) == (
        1e-3,
        2,
        10,
    )
    assert cfg.get("scheduler") is None
    assert (cfg.data.val_from, cfg.data.val_fraction) == ("test", 0.5)
    if model == "lstm_attn":
        assert cfg.model.query_init == "uniform"  # the chapter's U(-0.5, 0.5) query
    if model == "lstm_mhsa":
        assert cfg.model.num_heads == 8 and 2 * cfg.model.hidden_size == 256  # 8 heads, 256 wide
        assert cfg.model.attn_norm == "none"
    issue_split = compose_cfg(f"experiment=imdb/chapter_{row}", "data=imdb")
    assert (issue_split.data.val_from, issue_split.data.val_fraction) == ("train", 0.1)
    del cfg.data, issue_split.data, cfg.hydra, issue_split.hydra
    assert cfg == issue_split  # the split is all that data=imdb changes


# Each model's bare command is its strongest measured recipe: the experiment that measured it.
RECIPE_OF_MODEL = {
    "bag_attn": ["experiment=bag/additive", "recipe=bag_tuned"],
    "bag_maxpool": ["experiment=bag/maxpool", "recipe=bag_cosine"],
    "bag_mlp": ["experiment=bag/mlp"],
    "lstm_attn": ["experiment=imdb/tuned"],
    "lstm_mean": ["experiment=imdb/chapter_mean", "data=imdb"],
    "lstm_mhsa": ["experiment=imdb/chapter_mhsa", "data=imdb", "model.attn_norm=layer"],
    "transformer": ["experiment=lcqmc/tuned"],
}


def test_every_model_but_the_unmeasured_has_its_measured_recipe():
    # no full-data run on record yet: these keep plain defaults (the translation experiments set
    # theirs in conf/experiment/translation/)
    unmeasured = {"self_attn", "seq2seq", "transformer_seq2seq"}
    assert set(MODELS) - set(RECIPE_OF_MODEL) == unmeasured


@pytest.mark.parametrize("model", sorted(RECIPE_OF_MODEL))
def test_a_bare_model_run_is_its_strongest_measured_recipe(compose_cfg, model):
    bare = OmegaConf.to_container(compose_cfg(f"model={model}"))
    measured = OmegaConf.to_container(compose_cfg(*RECIPE_OF_MODEL[model]))
    for cfg in (bare, measured):
        del cfg["hydra"]
    assert bare == measured


def test_no_yaml_names_an_absolute_path():
    """Configs travel between machines: data comes from paths.data_dir=<data_dir> or
    $ATTNEXP_DATA, outputs from paths.root_dir; no yaml (comments included) names a machine's path."""
    # a "/" that starts a path, not one inside a path (docs/x, ${...}/x, <run dir>/x, ~/x, http://)
    absolute = re.compile(r"(?<![\w.}>~:/])/[\w.-]")
    group = re.compile(r"^\s*- (override )?/")  # a defaults entry names a config group: /model
    found = [
        f"{path.relative_to(CONF_DIR)}:{number}: {line.strip()}"
        for path in sorted(CONF_DIR.rglob("*.yaml"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if absolute.search(line) and not group.match(line)
    ]
    assert found == []


# What reads a tensor's value back to the host: on CUDA each one waits for the GPU (a sync).
READ_BACKS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


def train_steps(task, optimizer, batches: list[dict]) -> None:
    """Training steps as ClassificationTask takes them (forward, loss, stats update), then
    backward and the optimizer's step."""
    for batch in batches:
        loss = task._shared_step(batch, "train")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def first_batches(datamodule, device: str, count: int = 2) -> list[dict]:
    batches = []
    for batch in datamodule.train_dataloader():
        batch = {k: v.to(device) for k, v in batch.items()}
        batches.append(datamodule.on_after_batch_transfer(batch, 0))
        if len(batches) == count:
            return batches
    return batches


@pytest.mark.parametrize("model", MODELS)
def test_every_model_steps_without_reading_tensors_back(tiny_root, model, monkeypatch):
    """The CPU stand-in for the CUDA test below: a training step (forward, loss, stats, backward)
    calls none of the methods that read a value back to the host, which on CUDA each stall the
    step until the GPU catches up. (The optimizer's step is left out: torch's Adam reads its
    step counter, a CPU tensor, with .item(), which syncs nothing.)"""
    cfg = compose_in(tiny_root, f"model={model}", "data.batch_size=8")
    datamodule, task = build(cfg, dict(cfg.hydra.runtime.choices))
    datamodule.setup("fit")
    batches = first_batches(datamodule, "cpu")
    task.train()

    def refuse(name):
        def read_back(self, *args, **kwargs):
            raise AssertionError(f"Tensor.{name} in a training step ({model})")

        return read_back

    with monkeypatch.context() as patched:
        for name in READ_BACKS:
            patched.setattr(torch.Tensor, name, refuse(name))
        for batch in batches:
            task._shared_step(batch, "train").backward()


@pytest.mark.parametrize("model", [pytest.param(m, marks=ON_GPU) for m in MODELS])
def test_every_model_trains_on_cuda_without_host_sync(tiny_root, model):
    """A few training steps of each model (its batches on the GPU first, as Lightning puts them),
    with torch.cuda.set_sync_debug_mode("error"): any device sync inside a step raises."""
    cfg = compose_in(tiny_root, f"model={model}", "data.batch_size=8")
    datamodule, task = build(cfg, dict(cfg.hydra.runtime.choices))
    datamodule.setup("fit")
    task = task.cuda().train()
    batches = first_batches(datamodule, "cuda", count=3)
    optimizer = task.build_optimizer()
    train_steps(task, optimizer, batches[:1])  # the first step allocates the optimizer state
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        train_steps(task, optimizer, batches[1:])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    if model in CLASSIFIERS:
        (stats,) = task.train_metrics.values()
        assert int(stats.update_count) == 3
    else:  # the translation task sums each step's target tokens on the device
        assert int(task._sums["train/tokens"]) == sum(int(b["tgt_mask"].sum()) for b in batches)
