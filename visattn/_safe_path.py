"""The working folder off the import path of ``python -m visattn...`` commands.

``python -m`` puts the working folder first on ``sys.path``, so a folder named ``lightning/``
(or ``albumentations``, ``onnxruntime``, ``ray``, ``cv2``, ``timm``, ``torch``...) beside a
downloaded checkpoint would be imported, and its code run, in place of the installed package
the moment a command reached that import. visattn's package ``__init__`` calls
:func:`drop_working_folder` before it imports anything else: while ``python -m`` is still
locating the module it runs (``sys.argv[0]`` is ``"-m"`` then, as the ``-m`` option's
documentation says), the working folder's entry leaves ``sys.path``. visattn itself has been
found by then, so a source checkout still runs its own code. ``python -P`` and the installed
``visattn`` console command never put the folder there at all.

A module the user names (``--import``) is their own code, run by their choice: it is imported
with the working folder searched for that import only (:func:`import_named`).
"""

import importlib  # (no __future__ import: only modules already loaded at start-up run here)
import os
import sys
from types import ModuleType
from typing import Any

__all__ = [
    "IMPORTED",
    "IMPORT_HELP",
    "add_import_option",
    "drop_working_folder",
    "import_named",
    "imports_or_exit",
    "take_imports",
    "under_python_m",
]

#: the modules the user named that this process imported, in order (what a run records)
IMPORTED: list[str] = []


def under_python_m() -> bool:
    """Whether ``python -m`` is locating its module now (it sets ``sys.argv[0]`` to ``"-m"``
    until the module is found)."""
    return sys.argv[:1] == ["-m"] and not sys.flags.safe_path


def drop_working_folder() -> None:
    """Take the working folder's entry off ``sys.path`` when ``python -m`` put it there."""
    if not under_python_m() or not sys.path:
        return
    first = sys.path[0]
    cwd = os.getcwd()
    if first in ("", ".") or os.path.realpath(first) == os.path.realpath(cwd):
        del sys.path[0]


def import_named(name: str) -> ModuleType:
    """Import the module ``name`` that the user named (``--import my_blocks``, ``imports:`` in
    a sweep file): installed modules first, then the working folder, which ``python -m``
    commands otherwise keep off the import path. The folder is searched for this import (and
    what that module imports while it loads) only.

    Raises:
        ValueError: ``name`` is no module name (a path, an empty string).
        ModuleNotFoundError: naming the module and where it was looked for.
    """
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise ValueError(
            f"--import {name!r}: not a module name (my_blocks for my_blocks.py in the working "
            "folder, or an installed package's module, my_pkg.blocks)"
        )
    folder = os.getcwd()
    added = folder not in sys.path
    if added:
        sys.path.append(folder)  # last: a name the user gave, never in front of an installed one
    try:
        module = importlib.import_module(name)
        if name not in IMPORTED:
            IMPORTED.append(name)
        return module
    except ModuleNotFoundError as e:
        if e.name != name.split(".")[0] and e.name != name:
            raise  # the module was found; something it imports is missing
        raise ModuleNotFoundError(
            f"--import {name}: no module {name!r} is installed or in the working folder "
            f"({folder}); give a module name (my_blocks for my_blocks.py), not a path",
            name=name,
        ) from None
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def take_imports(argv: list[str]) -> list[str]:
    """Import the modules ``argv`` names with ``--import MODULE`` (or ``--import=MODULE``;
    several with commas or the option repeated), and return ``argv`` without them: the user's
    own blocks are registered before the rest of the command line is read.

    Raises:
        ValueError: ``--import`` without a module name.
        ModuleNotFoundError: a named module is nowhere (:func:`import_named`).
    """
    rest: list[str] = []
    names: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--import":
            value = next(args, None)
            if value is None or value.startswith("-"):
                raise ValueError("--import needs a module name: --import my_blocks")
            names += value.split(",")
        elif arg.startswith("--import="):
            names += arg.split("=", 1)[1].split(",")
        else:
            rest.append(arg)
    for name in names:
        import_named(name.strip())
    return rest


#: ``--import``'s help, the same in every command
IMPORT_HELP = (
    "a module of your own to import first, so that the blocks it registers are known by name "
    "(my_blocks for my_blocks.py in the working folder, or an installed module); repeat it or "
    "separate modules with commas"
)


def add_import_option(parser: Any) -> None:
    """``--import MODULE`` in an ``argparse`` parser's help (:func:`imports_or_exit` has taken
    it off the command line before the parser reads it)."""
    parser.add_argument(
        "--import", dest="imports", action="append", metavar="MODULE", help=IMPORT_HELP
    )


def imports_or_exit(argv: list[str], prog: str) -> list[str]:
    """:func:`take_imports` for a command's ``main``: a module that is not there, or a bad
    ``--import``, ends the command with one line and exit status 2."""
    try:
        return take_imports(argv)
    except (ValueError, ImportError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
