"""Every subpackage of reinforge is listed in pyproject.toml's explicit `packages`, so a wheel or a
non-editable install (CI's clean clone installs editable, which hides a missing entry) ships it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_reinforge_package_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "reinforge").rglob("__init__.py")}
    assert found - listed == set(), f"add these to [tool.setuptools] packages in pyproject.toml: {sorted(found - listed)}"


def test_every_c_source_is_shipped_as_package_data() -> None:
    """The engine and the learner compile their C kernels from the installed package
    (reinforge.kernels): a wheel without a .c or .h file would quietly fall back to torch's slower ops."""
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for source in [*(ROOT / "reinforge").rglob("*.c"), *(ROOT / "reinforge").rglob("*.h")]:
        package = ".".join(source.parent.relative_to(ROOT).parts)
        assert any(source.match(pattern) for pattern in package_data.get(package, [])), (
            f"add {source.name!r} (or '*{source.suffix}') to [tool.setuptools.package-data] {package!r} in pyproject.toml"
        )
