"""`python -m attnexp.report <dir> [--out DIR]`: the command line of the report (attnexp.runs.report)."""

import argparse
import logging
import sys
from pathlib import Path

from attnexp.runs.report import write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnexp.report",
        description="compare the runs under a multirun dir (or any folder of runs)",
    )
    parser.add_argument("dir", type=Path, help="a multirun dir, or any folder holding run dirs")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: DIR)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not args.dir.is_dir():
        print(f"error: {args.dir} is not a directory", file=sys.stderr)
        return 2
    try:
        written = write_report(args.dir, args.out)
    except (FileNotFoundError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(written["markdown"].read_text())
    print("wrote:", *(str(p) for p in written.values()), sep="\n  ")
    return 0


def cli() -> None:
    sys.exit(main())
