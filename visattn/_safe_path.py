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

__all__ = ["WORKING_FOLDER", "drop_working_folder", "import_named", "under_python_m"]

#: the folder ``python -m`` had put first on ``sys.path`` and :func:`drop_working_folder` took
#: off it (``None``: nothing was taken off)
WORKING_FOLDER: str | None = None


def under_python_m() -> bool:
    """Whether ``python -m`` is locating its module now (it sets ``sys.argv[0]`` to ``"-m"``
    until the module is found)."""
    return sys.argv[:1] == ["-m"] and not sys.flags.safe_path


def drop_working_folder() -> None:
    """Take the working folder's entry off ``sys.path`` when ``python -m`` put it there."""
    global WORKING_FOLDER
    if not under_python_m() or not sys.path:
        return
    first = sys.path[0]
    cwd = os.getcwd()
    if first in ("", ".") or os.path.realpath(first) == os.path.realpath(cwd):
        WORKING_FOLDER = cwd
        del sys.path[0]


def import_named(name: str) -> ModuleType:
    """Import the module ``name`` that the user named (``--import my_blocks``, ``imports:`` in
    a config file): installed modules first, then the working folder, which ``python -m``
    commands otherwise keep off the import path. The folder is searched for this import (and
    what that module imports while it loads) only.

    Raises:
        ModuleNotFoundError: naming the module and where it was looked for.
    """
    folder = os.getcwd()
    added = folder not in sys.path
    if added:
        sys.path.append(folder)  # last: a name the user gave, never in front of an installed one
    try:
        return importlib.import_module(name)
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
