"""attnexp.errors: the checks on settings, each refusal naming the key, the value and the rule."""

import pytest
from torch.multiprocessing import ProcessRaisedException

from attnexp.errors import (
    ConfigError,
    exit_with,
    message_lines,
    require_fraction,
    require_non_negative,
    require_positive,
    require_probability,
    require_seed,
    spawned_refusal,
)


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "2"])
def test_require_positive_refuses_what_is_not_a_count(value):
    with pytest.raises(
        ConfigError, match=rf"^k={value} must be a positive integer \(set k=\.\.\.\)"
    ):
        require_positive("k", value)


@pytest.mark.parametrize("value", [-1, False, 1.0])
def test_require_non_negative_refuses_what_is_not_a_count(value):
    with pytest.raises(ConfigError, match=rf"^k={value} must be a whole number >= 0 \(set k="):
        require_non_negative("k", value)


def test_counts_that_pass():
    require_positive("k", 1)
    require_non_negative("k", 0)


@pytest.mark.parametrize("value", [0, 0.0, 1, 1.0, -0.5, 1.5, True, "0.5"])
def test_require_fraction_is_strictly_between_0_and_1(value):
    with pytest.raises(ConfigError, match=rf"^k={value} must be between 0 and 1 \(exclusive\)"):
        require_fraction("k", value)


@pytest.mark.parametrize("value", [0, 1.5, True])
def test_require_fraction_upto_one_keeps_0_out(value):
    with pytest.raises(ConfigError, match=r"between 0 \(exclusive\) and 1 \(inclusive\)"):
        require_fraction("k", value, upto_one=True)


def test_fractions_that_pass():
    require_fraction("k", 0.5)
    require_fraction("k", 1, upto_one=True)
    require_fraction("k", 1.0, upto_one=True)


@pytest.mark.parametrize("value", [1, 1.0, -0.1, True, "0.1"])
def test_require_probability_refuses_rates_outside_0_to_1(value):
    with pytest.raises(ConfigError, match=rf"^k={value} must be a rate from 0 \(inclusive\)"):
        require_probability("k", value)
    require_probability("k", 0)
    require_probability("k", 0.99)


@pytest.mark.parametrize("seed", [-1, 2**32, True, 1.0, "1"])
def test_require_seed_refuses_what_torch_or_numpy_would_not_take(seed):
    with pytest.raises(
        ConfigError, match=r"from 0 to 2\*\*32 - 1 \(set data.split_seed=0, 1, \.\.\.\)$"
    ):
        require_seed("data.split_seed", seed)


def test_require_seed_offers_null_only_where_the_key_takes_it():
    for seed in (None, 0, 2**32 - 1):
        require_seed("seed", seed)
    with pytest.raises(ConfigError, match=r"^seed=-1 must .*\(set seed=0, 1, \.\.\. or null\)$"):
        require_seed("seed", -1)


def test_a_spawned_process_crash_that_only_mentions_a_config_error_is_not_a_refusal():
    text = "Traceback (most recent call last):\nyaml.ConfigError: bad\n"
    assert spawned_refusal(ProcessRaisedException(text, 1, 123)) is None


def test_message_lines_drop_blank_lines_and_cut_long_ones():
    err = RuntimeError("Error(s) in loading state_dict:\n\n   " + "x" * 50 + "\n  short  \n")
    assert message_lines(err, width=20) == ["Error(s) in loadi...", "x" * 17 + "...", "short"]


def test_exit_with_says_the_error_on_stderr_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        exit_with(ConfigError("seed=-1 must be ..."))
    assert exit_info.value.code == 2
    assert capsys.readouterr() == ("", "error: seed=-1 must be ...\n")
