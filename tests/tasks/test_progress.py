"""Progress in a pipe is a few plain lines, on a terminal the rich bar; Lightning's tips never."""

import io
import logging

from pytorch_lightning.callbacks import RichProgressBar

from attnexp.tasks.progress import NoTips, PlainProgress, progress_callbacks


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_display_follows_the_stream():
    assert progress_callbacks(False) == []
    (piped,) = progress_callbacks(True, io.StringIO())
    assert isinstance(piped, PlainProgress)
    (bar,) = progress_callbacks(True, Terminal())
    assert isinstance(bar, RichProgressBar)


def test_lightnings_tips_are_dropped_its_other_lines_kept():
    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("pytorch_lightning", logging.INFO, "", 0, msg, None, None)

    assert not NoTips().filter(record("💡 Tip: For seamless cloud logging, try installing x"))
    assert NoTips().filter(record("GPU available: False, used: False"))


def test_a_piped_run_writes_plain_lines(tmp_path):
    from tests.cli_helpers import TINY, run_cli

    result = run_cli(tmp_path, *[a for a in TINY if "enable_progress_bar" not in a])
    output = result.stdout + result.stderr
    assert result.returncode == 0, result.stderr[-3000:]
    assert "\r" not in output and "Tip:" not in output
    assert "epoch 0/1: done" in output
