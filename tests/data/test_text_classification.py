"""The text -> label base DataModule: its stratified split, and a new dataset that is only a
subclass (plus its yaml), trained end to end and read by predict."""

import json
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from imdb_data import TINY_MODEL, train_in_process
from omegaconf import OmegaConf

from attnexp.data.splits import held_out_sizes, stratified_split
from attnexp.data.text_classification import TextClassificationDataModule
from attnexp.errors import ConfigError
from attnexp.predictors import predictor_for
from attnexp.runner.build import instantiate_checked


class TinyTopics(TextClassificationDataModule):
    """A made-up 3-label dataset: `<data_dir>/topics/{train,test}.parquet`, no hub, no sample."""

    dataset_name = "Topics"
    data_subdir = "topics"
    labels = ("sports", "politics", "science")
    noun = "headlines"
    probes = (
        ("the team won the final match", 0),
        ("parliament passed the new law", 1),
        ("the lab measured the atoms", 2),
    )


TOPIC_WORDS = (
    ["team", "match", "goal", "league"],
    ["parliament", "law", "vote", "minister"],
    ["lab", "atoms", "theory", "experiment"],
)
FILLER = ["the", "a", "new", "today", "after", "week", "report", "says", "."]


def write_topics(data_dir: Path, num_train: int = 45, num_test: int = 15, seed: int = 0) -> Path:
    """<data_dir>/topics/{train,test}.parquet: text, label (0-2), sorted by label."""
    rng = random.Random(seed)
    folder = Path(data_dir) / "topics"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", num_train), ("test", num_test)):
        labels = sorted(i % 3 for i in range(n))
        texts = [" ".join(rng.sample(FILLER, 4) + rng.choices(TOPIC_WORDS[y], k=2)) for y in labels]
        table = pa.table({"text": texts, "label": pa.array(labels, pa.int64())})
        pq.write_table(table, folder / f"{split}.parquet")
    return folder


TINY_SETTINGS = {"min_frequency": 1, "max_seq_len": 8, "batch_size": 4, "val_fraction": 0.2}


def make_topics(tmp_path: Path, **kwargs) -> TinyTopics:
    cache_dir = str(tmp_path / "cache")
    return TinyTopics(str(tmp_path / "data"), cache_dir=cache_dir, **{**TINY_SETTINGS, **kwargs})


def test_stratified_split_is_fixed_for_a_seed():
    labels = [0] * 50 + [1] * 50
    assert stratified_split(labels, 0.1, 3) == stratified_split(labels, 0.1, 3)
    assert stratified_split(labels, 0.1, 3) != stratified_split(labels, 0.1, 4)


def test_block_split_holds_out_runs_of_consecutive_reviews():
    labels = [0] * 1000 + [1] * 1000  # sorted by label, like the local copies
    keep, held = stratified_split(labels, 0.3, seed=0, block=100)
    assert sorted(keep + held) == list(range(2000))
    assert Counter(labels[i] for i in held) == {0: 300, 1: 300}
    # Whole runs: 3 runs of 100 per label, each starting on a run boundary.
    starts = [i for i in held if i - 1 not in held]
    assert len(starts) <= 6 and all(i % 100 == 0 for i in starts)
    assert stratified_split(labels, 0.3, 0, 100) != stratified_split(labels, 0.3, 1, 100)
    # A fraction that is not a whole number of runs: the last run taken is cut.
    assert len(stratified_split(labels, 0.25, 0, 100)[1]) == 500


def test_held_out_sizes_add_up_to_the_fraction_of_the_total():
    assert held_out_sizes([5, 5], 0.5) == [3, 2]  # 5 of 10: not 2 + 2 (half to even per label)
    assert held_out_sizes([25, 25], 0.1) == [3, 2]
    assert held_out_sizes([12500, 12500], 0.1) == [1250, 1250]  # the real data: exact shares
    assert held_out_sizes([3, 4], 0.3) == [1, 1]
    keep, held = stratified_split([0] * 5 + [1] * 5, 0.5, seed=0)
    assert len(held) == 5 and sorted(keep + held) == list(range(10))


@pytest.mark.parametrize("total", [2005, 15, 1005, 25_000])
def test_train_fraction_keeps_what_the_default_dev_split_leaves(total):
    """1 - 0.9 is 0.09999999999999998: 2005 of it rounded to 200, where 0.1 gives 201."""
    counts = [total // 2 + 1, total - total // 2 - 1]
    assert held_out_sizes(counts, 1 - 0.9) == held_out_sizes(counts, 0.1)
    labels = [0] * counts[0] + [1] * counts[1]
    assert stratified_split(labels, 1 - 0.9, seed=3) == stratified_split(labels, 0.1, seed=3)


def test_a_subclass_is_a_whole_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert make_topics(tmp_path).planned_source() is None  # no folder, no hub, no sample
    write_topics(tmp_path / "data")
    dm = make_topics(tmp_path)
    dm.setup("fit")
    assert dm.source == "local" and dm.model_kwargs["num_classes"] == 3
    assert Counter(dm.datasets["val"].labels) == {0: 3, 1: 3, 2: 3}  # stratified: 9 of 45
    assert (len(dm.datasets["train"]), len(dm.datasets["test"])) == (36, 15)
    assert len(list((tmp_path / "cache" / "topics").glob("*.arrow"))) == 3
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 4 and batch["labels"].max() <= 2
    probes = dm.probe_batch()
    assert probes["labels"].tolist() == [0, 1, 2] and probes["mask"].sum(1).min() > 0


@pytest.mark.parametrize(
    "labels,match",
    [
        ([0, 3], r"topics/train.parquet row 1: label must be 0 \(sports\), 1 \(politics\) or 2"),
        ([0.0, 1.0], r"row 0: .* as an integer, found 0.0"),
    ],
)
def test_bad_labels_are_named_with_the_datasets_classes(tmp_path, labels, match):
    folder = write_topics(tmp_path / "data")
    pq.write_table(
        pa.table({"text": ["a goal", "a vote"], "label": labels}), folder / "train.parquet"
    )
    with pytest.raises(ConfigError, match=match):
        make_topics(tmp_path).setup("fit")
    (folder / "test.parquet").unlink()
    with pytest.raises(ConfigError, match=r"Topics: .* holds no train.parquet \+ test.parquet"):
        make_topics(tmp_path).setup("fit")


def test_a_new_dataset_trains_and_predicts(compose_cfg, tmp_path):
    """One class (above) plus one yaml: `data=topics` with an existing text model, through the
    runner (fast_dev_run), then the run dir's DataModule encodes raw text for predict."""
    conf = tmp_path / "conf"
    (conf / "data").mkdir(parents=True)
    (conf / "data" / "topics.yaml").write_text(
        f"_target_: {__name__}.{TinyTopics.__name__}\n"
        "data_dir: ${paths.data_dir}\nseed: ${seed}\nmin_frequency: 1\nval_fraction: 0.2\n"
        "max_seq_len: 64\nbatch_size: 32\ncache_dir: null\n"
    )
    write_topics(tmp_path / "data")
    cfg = compose_cfg(
        "model=lstm_attn",
        "data=topics",
        f"hydra.searchpath=[file://{conf}]",
        *TINY_MODEL,
        f"data.cache_dir={tmp_path}/cache",
        "trainer.fast_dev_run=true",
    )
    run = tmp_path / "run"
    metrics = train_in_process(cfg, run)
    assert 0.0 <= metrics["test/acc"] <= 1.0
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "completed" and record["data_source"] == "local"
    assert record["choices"]["data"] == "topics"
    # As predict rebuilds it: the run's data config and the tokenizer saved in the run dir.
    dm = instantiate_checked(OmegaConf.load(run / ".hydra" / "config.yaml").data)
    dm.load_artifacts(str(run))
    dm.setup("predict")
    assert dm.datasets == {} and dm.model_kwargs["num_classes"] == 3
    batch = predictor_for(dm).encode_raw(
        [{"text": "The minister lost the vote"}, {"text": "goal " * 40}]
    )
    assert batch["input_ids"].shape == (2, 32) and batch["mask"].sum(1).tolist() == [5, 32]
    assert batch["input_ids"][0, 1] == dm.tokenizer.token_to_id("minister")
    assert (
        predictor_for(dm).check_raw({"text": " "})
        and predictor_for(dm).check_raw({"text": "a goal"}) is None
    )
    assert any("unknown" in n for n in predictor_for(dm).raw_notes({"text": "zzqx"}))
    assert [predictor_for(dm).prediction_label(i) for i in range(3)] == list(TinyTopics.labels)
