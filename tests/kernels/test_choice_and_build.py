"""Building the C kernels (reinforge.kernels.build) and choosing them (reinforge.kernels.choice):
cached by content, no compiler, a failing compiler, modes, threads and dtypes."""

from __future__ import annotations

import pytest
import torch

from reinforge.kernels import build, choice, decode_attention, layers, packed_attention

SOURCES = (decode_attention.SOURCE, packed_attention.SOURCE, layers.SOURCE)


def test_build_is_cached_by_content(tmp_path) -> None:
    first = build.build(decode_attention.SOURCE, tmp_path)
    built_at = first.stat().st_mtime_ns
    assert first.parent == tmp_path and first.name.startswith("decode_attention-")
    assert build.build(decode_attention.SOURCE, tmp_path) == first and first.stat().st_mtime_ns == built_at
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial file left behind
    other = build.build(layers.SOURCE, tmp_path)  # another source: a file of its own
    assert other.name.startswith("layers-") and other != first


def test_a_changed_header_is_a_new_build(tmp_path) -> None:
    sources, cache = tmp_path / "src", tmp_path / "cache"
    sources.mkdir()
    for path in (decode_attention.SOURCE, decode_attention.SOURCE.with_name("exp_nonpositive.h")):
        (sources / path.name).write_text(path.read_text())
    first = build.build(sources / "decode_attention.c", cache)
    header = sources / "exp_nonpositive.h"
    header.write_text(header.read_text() + "\n/* changed */\n")
    assert build.build(sources / "decode_attention.c", cache) != first


def test_no_compiler_on_path(monkeypatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(build.NativeCodeUnavailable, match="no C compiler found"):
        build.build(decode_attention.SOURCE)


def test_a_failing_compiler_means_auto_falls_back_native_says_why_and_nothing_retries(broken_compiler, monkeypatch) -> None:
    assert not choice.wanted("auto", "engine.decode_kernels", SOURCES)
    assert not choice.wanted("torch", "engine.decode_kernels", SOURCES)
    with pytest.raises(build.NativeCodeUnavailable, match="false failed on decode_attention.c"):
        choice.wanted("native", "engine.decode_kernels", SOURCES)
    with pytest.raises(build.NativeCodeUnavailable):
        build.load_function(layers.SOURCE, "swiglu_forward")
    assert list(broken_compiler.iterdir()) == []
    # the failed build is remembered: a later engine (every weight sync makes one) does not retry it
    monkeypatch.setenv("CC", "cc")
    assert build.unavailable_reason(decode_attention.SOURCE) is not None


def test_modes_threads_and_dtypes() -> None:
    with pytest.raises(ValueError, match="algo.packed_kernels must be one of auto, torch, native, not 'c'"):
        choice.check_mode("c", "algo.packed_kernels")
    assert choice.wanted("auto", "algo.packed_kernels", SOURCES) and choice.wanted("native", "algo.packed_kernels", SOURCES)
    assert not choice.wanted("torch", "algo.packed_kernels", SOURCES)
    x = torch.zeros(2, 4)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # torch spreads its ops over threads; the C loops do not
        assert not choice.usable(x, "auto") and choice.usable(x, "native")
        torch.set_num_threads(1)
        assert choice.usable(x, "auto")
        assert not choice.usable(x.double(), "native") and not choice.usable(x.bfloat16(), "native")
        with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16 autocast: its matmuls hand out bf16
            assert not choice.usable(x, "native")
    finally:
        torch.set_num_threads(threads)
