"""A user's project directory for tests of code named by import path: files written in a temp
dir, the current directory moved there (as a user runs `reinforge train` from their project), and
everything the resolver added (sys.path entries, import roots, the user's modules) undone after."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from reinforge import import_paths


class UserProject:
    def __init__(self, root: Path):
        self.dir = root

    def write(self, relative: str, source: str) -> Path:
        path = self.dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path


def forget_modules_under(directory: Path) -> None:
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(directory)):
            del sys.modules[name]


@pytest.fixture
def user_project(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    # A module of the same name that another test imported from its own temp dir must not stand in
    # for this project's (`import rewards` would find it in sys.modules).
    forget_modules_under(tmp_path_factory.getbasetemp())
    root = tmp_path / "project"
    root.mkdir()
    monkeypatch.chdir(root)
    saved_path, saved_roots, saved_files = list(sys.path), list(import_paths._roots), dict(import_paths._by_file)
    yield UserProject(root)
    sys.path[:] = saved_path
    import_paths._roots[:] = saved_roots
    import_paths._by_file.clear()
    import_paths._by_file.update(saved_files)
    forget_modules_under(tmp_path)
