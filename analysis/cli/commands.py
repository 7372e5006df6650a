"""How each ``python -m analysis`` command is registered: a sub-parser described by its run
function's docstring, so that the text a reader of the code sees is the text ``--help`` prints."""
from __future__ import annotations

import argparse
from collections.abc import Callable


def add_command(subparsers, name: str, run: Callable[[argparse.Namespace], int | None], help: str,
                description: str | None = None) -> argparse.ArgumentParser:
    """The sub-parser of ``name``: ``help`` in the command list, ``description`` (default: ``run``'s
    docstring, which argparse re-wraps) on its own page, and ``run`` as what it calls."""
    description = description or run.__doc__
    if not description:
        raise TypeError(f"command {name}: {run.__name__} has no docstring to describe the command")
    s = subparsers.add_parser(name, help=help, description=description)
    s.set_defaults(func=run)
    return s
