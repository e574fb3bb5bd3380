"""User code named in the config by import path: one resolver for every kind of part.

Everywhere the config names a part by a short name (a reward function, a task source, an env, a
tool, an advantage estimator, a policy loss, a verifier), it also takes an import path:

    package.module:name      imported with the current directory and the recipe's directory on
                             sys.path (as `uvicorn main:app` does), so a project run from its own
                             directory needs no install and no PYTHONPATH
    ./file.py:name           a file, relative to the recipe's directory (on the command line: to
                             the current directory); made absolute when the config is loaded
    /abs/path/file.py:name   a file

`name` may be dotted (`module:Class.method`). A file is one module however it is named (by module
path or by file path, in any spelling), so its module-level code (a registration) runs once. The
same string is imported again by reward worker processes, Ray workers and data-parallel learners,
so a part never has to be picklable: the directories this process added to sys.path are handed to
them (`import_roots`). Import errors name the user's file and line, not the import machinery.

An object handed over from Python (`reinforge.train(reward_fns=[fn])`) is named by a string too,
so it takes the same code path: `reinforge.api.objects` names it by its import path when it has
one, and otherwise binds it here under a `<python ...>` label (`bind_object`) that resolves in this
process only (the saved config says so, and a worker or a resumed run cannot re-create it).

This module only finds objects; each kind checks the shape of what it found (a reward must be
callable with (task, trajectory), an env must have episode(), ...) where that kind lives.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import sysconfig
import threading
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# `something.py:name`: a file path (relative or absolute), then the object in it.
_FILE_PATH = re.compile(r"^(?P<file>[^:]+\.py):(?P<attr>[A-Za-z_][\w.]*)$")
_MODULE_PATH = re.compile(r"^(?P<module>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*):(?P<attr>[A-Za-z_][\w.]*)$")
SYNTAX_HINT = "an import path is 'package.module:name' or './file.py:name'"

FILE_MODULE_PREFIX = "reinforge_user_"  # module names of files loaded by path
_by_file: dict[str, Any] = {}  # resolved file path -> the module loaded from it by path
_lock = threading.RLock()
_roots: list[str] = []  # directories this process put on sys.path for user code, in order
_bound: dict[str, Any] = {}  # name -> object handed over from Python (bind_object)
IN_MEMORY_PREFIX = "<python "  # labels of objects that exist only in the process that bound them


class ImportPathError(ValueError):
    """An import path that cannot be resolved; the message says which part failed and why
    (the caller prefixes the config key)."""


def is_import_path(spec: Any) -> bool:
    """True for 'pkg.module:name' and 'file.py:name' (built-in parts have plain names), and for
    the `<python ...: ...>` labels of objects handed over from Python."""
    return isinstance(spec, str) and ":" in spec


def is_in_memory(spec: Any) -> bool:
    """A `<python ...>` label: an object that only the process that bound it can resolve."""
    return isinstance(spec, str) and spec.startswith(IN_MEMORY_PREFIX)


def bind_object(name: str, obj: Any) -> None:
    """Make `load_object(name)` return `obj` in this process, without an import. `name` is the
    object's own import path (so that the trainer does not import a script a second time), or a
    `<python ...>` label for an object that has none."""
    with _lock:
        _bound[name] = obj


def unbind_object(name: str) -> None:
    with _lock:
        _bound.pop(name, None)


def bound_object(name: str) -> Any | None:
    with _lock:
        return _bound.get(name)


def add_import_root(directory: str | os.PathLike) -> None:
    """Put `directory` on sys.path (after the entries already there) for importing user modules;
    it is also handed to worker processes (`import_roots`)."""
    path = str(Path(directory).resolve())
    with _lock:
        if path not in _roots:
            _roots.append(path)
        if path not in sys.path:
            sys.path.append(path)


def import_roots() -> list[str]:
    """The directories user code is imported from (current directory first), for workers."""
    with _lock:
        return [str(Path.cwd().resolve()), *[r for r in _roots if r != str(Path.cwd().resolve())]]


def use_import_roots(roots: list[str]) -> None:
    """In a worker: make the trainer's user-code directories importable here too."""
    for root in roots:
        add_import_root(root)


def absolute_file_path(spec: Any, base_dir: str | os.PathLike) -> Any:
    """`./file.py:name` made absolute against `base_dir`; anything else unchanged."""
    if not isinstance(spec, str):
        return spec
    match = _FILE_PATH.match(spec)
    if match is None:
        return spec
    file = Path(match["file"]).expanduser()
    if file.is_absolute():
        return spec
    return f"{(Path(base_dir) / file).resolve()}:{match['attr']}"


def absolute_file_paths(tree: Any, base_dir: str | os.PathLike) -> Any:
    """Every `file.py:name` string in a config tree (dicts and lists) made absolute."""
    if isinstance(tree, dict):
        return {k: absolute_file_paths(v, base_dir) for k, v in tree.items()}
    if isinstance(tree, list):
        return [absolute_file_paths(v, base_dir) for v in tree]
    return absolute_file_path(tree, base_dir)


def load_object(spec: str) -> Any:
    """The object an import path names; ImportPathError saying what failed otherwise."""
    spec = spec.strip()
    with _lock:
        if spec in _bound:
            return _bound[spec]
    if is_in_memory(spec):
        raise ImportPathError(
            f"{spec} was handed over from Python (reinforge.train / reinforge.evaluate) in the process that "
            "wrote this config, and exists only there: no import can re-create it. Pass the same object "
            "again from Python (reinforge.train(..., resume=RUN_DIR, <the same arguments>)), or define it at "
            "module level and name it by import path ('package.module:name' or './file.py:name')"
        )
    file_match, module_match = _FILE_PATH.match(spec), _MODULE_PATH.match(spec)
    if file_match is None and module_match is None:
        raise ImportPathError(f"{spec!r} is not an import path: {SYNTAX_HINT}")
    try:
        if file_match is not None:
            module, attr = _import_file(Path(file_match["file"])), file_match["attr"]
        else:
            module, attr = _import_module(module_match["module"]), module_match["attr"]
    except ImportPathError as err:  # the path as written, then what failed
        raise ImportPathError(f"{spec!r}: {err}") from None
    target: Any = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(target, part):
            owner = _module_label(module) if i == 0 else ".".join(attr.split(".")[:i])
            raise ImportPathError(f"{spec!r}: {owner} has no attribute {part!r}{_defined_here(target)}")
        target = getattr(target, part)
    return target


def _module_label(module: Any) -> str:
    """A module as an error names it: a file by its path; a module by name and file, which shows a
    module of the same name found elsewhere on sys.path (an installed package shadowing the user's)."""
    file = getattr(module, "__file__", None)
    if module.__name__.startswith(FILE_MODULE_PREFIX) or file is None:
        return file or module.__name__
    return f"module {module.__name__} ({file})"


def _defined_here(namespace: Any) -> str:
    """'; it defines: a, b' for the public functions, classes and modules of `namespace` (those
    defined in it first), to spot a typo."""
    try:
        members = dict(vars(namespace))
    except TypeError:  # no __dict__ (an int, a slotted object): nothing worth listing
        return ""
    names = [n for n, v in members.items() if not n.startswith("_") and (callable(v) or inspect.ismodule(v))]
    own = [n for n in names if getattr(members[n], "__module__", None) == getattr(namespace, "__name__", None)]
    shown = own or names
    return f"; it defines: {', '.join(sorted(shown)[:20])}" if shown else ""


def _import_module(name: str) -> Any:
    with _lock:
        roots = import_roots()
        for root in roots:
            if root not in sys.path:
                sys.path.append(root)
        importlib.invalidate_caches()  # a file written since the last import (a notebook, a test) is found
        try:
            if name not in sys.modules:
                # The file was loaded by path already ('./x.py:f' elsewhere in the config): the same
                # module, not a second copy whose module-level code (a registration) runs twice.
                spec = importlib.util.find_spec(name)
                loaded = _by_file.get(os.path.realpath(spec.origin)) if spec is not None and spec.origin else None
                if loaded is not None:
                    sys.modules[name] = loaded
                    return loaded
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is not None and (name == err.name or name.startswith(err.name + ".")):
                raise ImportPathError(
                    f"cannot import module {name!r}: no module named {err.name!r} (looked in {', '.join(roots)} "
                    "and sys.path); run from your project's directory, add it to PYTHONPATH, or `pip install -e` it"
                ) from None
            raise ImportPathError(f"importing {name!r} failed: {_last_lines()}") from None
        except (Exception, SystemExit):  # noqa: BLE001 - any error raised by the user's module body
            raise ImportPathError(f"importing {name!r} failed: {_last_lines()}") from None


def _import_file(path: Path) -> Any:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ImportPathError(f"no such file: {path}")
    # A stable name per file: a worker that imports the same path gets the same module name, so
    # objects defined there unpickle in it; the hash keeps two `rewards.py` of two projects apart.
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", path.stem)
    name = f"{FILE_MODULE_PREFIX}{stem}_{digest}"
    with _lock:
        if name in sys.modules:
            return sys.modules[name]
        imported = _module_of_file(path)  # imported by module name already: the same module, once
        if imported is not None:
            return imported
        add_import_root(path.parent)  # the file's own imports of its sibling modules
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit):  # noqa: BLE001 - any error of the user's module body (not Ctrl-C)
            del sys.modules[name]
            raise ImportPathError(f"importing {path} failed: {_last_lines()}") from None
        _by_file[str(path)] = module
        return module


def _module_of_file(path: Path) -> Any | None:
    """A module already imported from the file `path` (resolved), if any."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and file.endswith(path.name) and os.path.realpath(file) == str(path):
            return module
    return None


def _last_lines() -> str:
    """The error and where in the user's code it was raised (not the whole import machinery): the
    innermost line of the user's own code, and the line that raised when that is elsewhere (in a
    library the user's code called)."""
    kind, err, tb = sys.exc_info()
    if isinstance(err, SyntaxError) and err.filename:  # the place is the error's, not a frame's
        return f"{kind.__name__}: {err.msg} ({err.filename}:{err.lineno})"
    frames = [f for f in traceback.extract_tb(tb) if "importlib" not in f.filename and f.filename != __file__]
    own = [f for f in frames if _is_user_file(f.filename)]
    places = [f"at {f.filename}:{f.lineno}" for f in (own[-1:] + frames[-1:])]
    where = f" ({', raised in '.join(dict.fromkeys(places))})" if places else ""
    return f"{kind.__name__}: {err}{where}"


def _is_user_file(filename: str) -> bool:
    """Not the standard library's, an installed package's or frozen code."""
    if filename.startswith("<"):
        return False
    library_dirs = {sysconfig.get_path(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return not any(d and filename.startswith(d + os.sep) for d in library_dirs)


def resolve_part(name: str, builtins: Mapping[str, T], kind: str) -> T | Any:
    """A built-in part by name, or the object an import path names. `kind` is what the error
    calls it ("reward function", "task source", ...)."""
    if is_import_path(name):
        return load_object(name)
    if name in builtins:
        return builtins[name]
    raise ImportPathError(
        f"unknown {kind} {name!r}; built-in: {', '.join(sorted(builtins))}; "
        f"or name your own as 'package.module:name' or './file.py:name'"
    )


def describe(obj: Any) -> str:
    """How an error names a user's object: module:qualname."""
    module = getattr(obj, "__module__", None) or type(obj).__module__
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}:{qualname}"


def check_call(fn: Any, args: tuple, kwargs: Mapping[str, Any], what: str, contract: str) -> None:
    """ImportPathError when `fn(*args, **kwargs)` would not bind (wrong arity, unknown keyword)."""
    if not callable(fn):
        raise ImportPathError(f"{what} is a {type(fn).__name__}, not a callable; {contract}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: nothing to check
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as err:
        raise ImportPathError(f"{what}: its signature {signature} does not fit ({err}); {contract}") from None
