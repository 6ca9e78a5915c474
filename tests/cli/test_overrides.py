"""A key Hydra refuses: named with the closest keys and every key its parent has; and nothing said
where Hydra composes the command line or fails for another reason."""

import pytest
from cli_helpers import run_cli, run_counting_imports

from attnexp.cli.overrides import quote_equals_values, unknown_keys


@pytest.mark.parametrize(
    "argv,expected",
    [
        (
            ["model.hiden_size=8"],
            "model.hiden_size=8: model (model=bag_attn) has no key 'hiden_size'; did you mean "
            "model.hidden_size? Its keys: attention, backbone, hidden_size, pooled_norm, scorer. "
            "(To add a new key on purpose, write +model.hiden_size=8.)",
        ),
        # the group choices and experiments are composed first: the keys are those of lstm_attn
        (
            ["experiment=imdb/chapter_dot", "model.hidden_sz=64"],
            "model.hidden_sz=64: model (model=lstm_attn) has no key 'hidden_sz'; did you mean "
            "model.hidden_size?",
        ),
        # ...also when the group choice comes after the setting: Hydra composes it first
        (
            ["model.hidden_sz=64", "model=lstm_attn"],
            "model.hidden_sz=64: model (model=lstm_attn) has no key 'hidden_sz'",
        ),
        (["sed=3"], "sed=3: the config has no key 'sed'; did you mean seed?"),
        (  # two close keys: "a or b"
            ["trainer.max_step=1"],
            "trainer.max_step=1: trainer (trainer=default) has no key 'max_step'; did you mean "
            "trainer.max_steps or trainer.max_epochs?",
        ),
        # a sweep over an unknown key, and a sweep over a group choice beside it
        (
            ["-m", "model=lstm_attn", "scorer=dot,additive", "trainer.max_epoch=1,2"],
            "trainer.max_epoch=1,2: trainer (trainer=default) has no key 'max_epoch'; did you "
            "mean trainer.max_epochs, trainer.min_epochs or trainer.max_steps?",
        ),
        # Hydra sets no key through an interpolation (model.scorer: ${scorer}), existing or not
        (
            ["model.scorer.attn_dim=3"],
            "model.scorer.attn_dim=3: model.scorer is ${scorer}, and Hydra sets no keys through "
            "an interpolation (set scorer.attn_dim=... instead)",
        ),
        (
            ["model=bag_mlp", "scheduler.warmup_ratio=0.1"],  # bag_mlp's recipe has none
            "scheduler.warmup_ratio=0.1: no scheduler is chosen, so it has no keys (choose one "
            "first: scheduler=cosine_warmup | linear_warmup)",
        ),
        (
            ["scorer=dot", "scorer.attn_dim=3"],
            "scorer.attn_dim=3: scorer (scorer=dot) has no key 'attn_dim'. It has no keys to set.",
        ),
        (
            ["experimnet=imdb/tuned"],
            "experimnet=imdb/tuned: the config has no key 'experimnet'; did",
        ),
        # a renamed key: its new name, whatever the model
        (
            ["model=transformer", "model.heads=2"],
            "model.heads=2: model.heads is now called model.num_heads (set model.num_heads=...)",
        ),
        (
            ["model=bag_mlp", "model.depth=2"],
            "model.depth=2: model.depth is now called model.num_layers (set model.num_layers=...)",
        ),
        (
            ["model.backbone.depth=2"],
            "model.backbone.depth=2: model.backbone is a single setting, with no keys below it "
            "(set model.backbone=...)",
        ),
        (
            ["data.eval_bag_sizes.0.x=3"],
            "data.eval_bag_sizes.0.x=3: data.eval_bag_sizes is a list of ",
        ),
        # a setting Hydra takes (an item of a list) is said nothing about: only the refused one
        (["data.eval_bag_sizes.0=3", "model.hiden=1"], "model.hiden=1: model (model=bag_attn)"),
        # a range sweep is judged by its first value; a key an earlier setting made is there
        (["-m", "seed=range(0,3)", "model.hiden=1"], "model.hiden=1: model (model=bag_attn)"),
        (
            ["trainer.profiler={a:1}", "trainer.profiler.a=2", "model.hiden=1"],
            "model.hiden=1: model (model=bag_attn) has no key 'hiden'",
        ),
    ],
)
def test_an_unknown_key_is_named_with_the_keys_there_are(argv, expected):
    (message,) = unknown_keys("train", argv)
    assert message.startswith(expected)


def test_an_interpolation_of_a_single_setting_offers_no_key_instead():
    """data.seed is ${seed}, a number: there is no seed.x to set instead (only an interpolation
    of a section, like model.scorer: ${scorer}, has keys to offer)."""
    assert unknown_keys("train", ["data.seed.x=1"]) == [
        "data.seed.x=1: data.seed is ${seed}, and Hydra sets no keys through an interpolation"
    ]


def test_the_top_level_keys_listed_are_the_configs_own():
    """Hydra's own settings (hydra.*) are not the config's keys; --multirun is -m."""
    (message,) = unknown_keys("train", ["--multirun", "sed=3,4"])
    keys = message.split(" Its keys: ", 1)[1].split(".", 1)[0].split(", ")
    assert "seed" in keys and "trainer" in keys and "hydra" not in keys


@pytest.mark.parametrize(
    "argv",
    [
        ["model.hidden_size=8", "seed=3", "trainer.max_epochs=2", "scorer.attn_dim=3"],
        # Hydra composes these (the run fails later, if at all): nothing to explain
        ["data.eval_bag_sizes.0=3", "trainer.accelerator=bogus"],
        ["trainer.profiler={a:1}", "trainer.profiler.a=2"],  # a key that an earlier one made
        ["+model.extra=1", "~scorer", "hydra.run.dirr=x"],  # additions, deletions, Hydra's keys
        ["-m", "scorer=glob(*)", "model.hiden=1"],  # a sweep with no first value to take
        ["scorer=dott", "model.hiden=1"],  # another error first: Hydra's message says it
        ["model.hidden_size=[1,"],  # a syntax error: Hydra's message says it
        ["--config-name", "evaluate", "model.hiden=1"],  # another config than train: not checked
        ["--config-name=evaluate", "model.hiden=1"],  # the same, as one argument
    ],
)
def test_nothing_to_say_when_the_keys_exist_or_another_error_comes_first(argv):
    assert unknown_keys("train", argv) == []


def test_the_cli_names_the_key_meant_and_exits_2(tmp_path):
    result = run_cli(tmp_path, "data.bag_sise=3")
    assert result.returncode == 2, result.stderr[-4000:]
    assert "error: data.bag_sise=3: data (data=bag_mnist) has no key 'bag_sise'; did you mean " in (
        result.stderr
    )
    assert "data.bag_size" in result.stderr and "Traceback" not in result.stderr


def test_path_values_holding_equals_are_quoted_for_hydra():
    job = "outputs/multiruns/s/1_scorer=dot,seed=0"
    listed = "outputs/multiruns/s/0_eval_bag_sizes=[1,3]"  # a swept list keeps its brackets
    assert quote_equals_values(
        [f"resume={job}", f"+ckpt_path={job}", f"paths.data_dir={listed}", f"out_dir={listed}"]
    ) == [
        f"resume='{job}'",
        f"+ckpt_path='{job}'",
        f"paths.data_dir='{listed}'",
        f"out_dir='{listed}'",
    ]
    as_given = [
        "scorer=dot,additive",  # a sweep: no `=` in the value
        "seed=1",
        "resume=outputs/runs/2026-11-22_10-00-00_ab12cd",  # a path without `=`: nothing to quote
        "ckpt_path=null",  # quoted, null became the path 'null'
        "-m",
        "--x=a=b",  # a flag, not a key
        f"resume='{job}'",  # quoted already
        'overrides=["data.batch_size=512"]',  # a list
        "overrides=data.batch_size=512",  # not a path: evaluate tells the list to write
        "model.x=a=b",  # not a path: Hydra's own refusal stands
        "ckpt_path=${oc.env:A=b}",  # an interpolation
        "ckpt_path=[a=b]",  # a list
        "-cd",
        job,  # an option's value, for Hydra's argparse as it is
    ]
    assert quote_equals_values(as_given) == as_given


def test_a_config_dir_holding_equals_is_found(tmp_path):
    """python -m attnexp -cd <a relative dir with '='>: Hydra adds the dir as given."""
    (tmp_path / "s" / "1_scorer=dot,seed=0").mkdir(parents=True)
    result, _ = run_counting_imports(
        ["-m", "attnexp", "-cd", "s/1_scorer=dot,seed=0", "--cfg", "job"], tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "not found" not in result.stderr
