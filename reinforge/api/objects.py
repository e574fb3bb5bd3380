"""Python objects handed to the API, named the way a config names a part.

Objects passed in Python and paths named in YAML are the same thing: `config_name(obj)` turns a
function, class or instance into the string the config holds, and everything downstream (checks,
reward worker processes, Ray workers, resume) takes the same path as a recipe's import path.

- An object its module exposes under a name (`my_pkg.rewards:score`, also a lambda or an
  instance assigned to a module-level name) is named by that import path: workers import it, the
  saved config.yaml names it, and `reinforge train --resume` re-creates it.
- An object of the script being run (`__main__`) is named by the script's path
  (`/abs/train_mine.py:score`, or `pkg.mod:score` under `python -m pkg.mod`): workers import the
  script, so its training call must sit under `if __name__ == "__main__":` (as for multiprocessing).
  This process resolves the path to the object itself and never imports the script again.
- Anything else (an inline lambda, a closure, an instance built in the call, anything defined in
  a notebook) gets a `<python object module:qualname>` label, bound in this process only. It runs
  in the trainer's process (reward.isolation=thread) or, if it pickles, in reward worker
  processes; the saved config says what it was, and a resume must pass it again.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import threading
from pathlib import Path
from typing import Any

from reinforge.import_paths import (
    FILE_MODULE_PREFIX,
    IN_MEMORY_PREFIX,
    ImportPathError,
    add_import_root,
    bind_object,
    bound_object,
    describe,
    load_object,
)

_lock = threading.Lock()
_names: dict[int, tuple[Any, str]] = {}  # id(obj) -> (obj, name): the same object keeps its name


def config_name(obj: Any) -> str:
    """The string a config holds for `obj`: its import path, or a `<python ...>` label."""
    if isinstance(obj, str):
        return obj
    with _lock:
        known = _names.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        if inspect.ismodule(obj):
            name = _label(f"module: {obj.__name__}", obj)  # the colon: labels read as import paths
        else:
            name = _importable_name(obj) or _label(f"object {describe(obj)}", obj)
        _names[id(obj)] = (obj, name)  # holding obj keeps its id from being reused
        return name


def tasks_label(what: str, content: str, obj: Any) -> str:
    """A `<python tasks: ...>` label for tasks handed over in memory; the digest of their content
    makes a resumed run with other tasks differ from the saved config."""
    digest = hashlib.sha1(content.encode()).hexdigest()[:12]
    label = f"{IN_MEMORY_PREFIX}tasks: {what}, sha1 {digest}>"
    bind_object(label, obj)  # the same content under the same label: a resumed run passes them again
    return label


def _label(text: str, obj: Any) -> str:
    base = f"{IN_MEMORY_PREFIX}{text}>"
    label, n = base, 1
    while (held := bound_object(label)) is not None and held is not obj:
        n += 1
        label = f"{base[:-1]} #{n}>"
    bind_object(label, obj)
    return label


def _importable_name(obj: Any) -> str | None:
    module_name = getattr(obj, "__module__", None)
    module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    if module is None:
        return None
    attr = _attribute_name(module, obj)
    if attr is None:
        return None
    if module_name == "__main__":
        return _script_name(module, attr, obj)
    if module_name.startswith(FILE_MODULE_PREFIX) and getattr(module, "__file__", None):
        path = f"{module.__file__}:{attr}"  # a file loaded by path: workers load the same file
    else:
        path = f"{module_name}:{attr}"
    try:
        if load_object(path) is not obj:
            return None
    except ImportPathError:
        return None
    _add_package_root(module)
    return path


def _attribute_name(module: Any, obj: Any) -> str | None:
    """The name under which `module` holds `obj`: its qualname, else a module-level name bound to it."""
    qualname = getattr(obj, "__qualname__", None)
    if isinstance(qualname, str) and "<" not in qualname:
        target: Any = module
        for part in qualname.split("."):
            target = getattr(target, part, None)
        if target is obj:
            return qualname
    names = sorted(n for n, v in vars(module).items() if v is obj)
    return names[0] if names else None


def _script_name(main: Any, attr: str, obj: Any) -> str | None:
    """`pkg.mod:attr` (python -m pkg.mod) or `/abs/script.py:attr`, bound to `obj` here; None in a
    notebook or a REPL, where there is no file a worker could import."""
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        path = f"{spec.name}:{attr}"
    elif getattr(main, "__file__", None) and Path(main.__file__).suffix == ".py":
        path = f"{Path(main.__file__).resolve()}:{attr}"
        add_import_root(Path(main.__file__).resolve().parent)  # the script's sibling modules
    else:
        return None
    bind_object(path, obj)  # this process has it: importing the script again would re-run it
    return path


def _add_package_root(module: Any) -> None:
    """The directory `module` was imported from becomes an import root, which Ray workers get."""
    file = getattr(module, "__file__", None)
    if not file:
        return
    root = Path(file).resolve().parent
    for _ in range(module.__name__.count(".") + (Path(file).name == "__init__.py")):
        root = root.parent
    add_import_root(root)
