"""Tests of scripts/setup.sh's detection (``--detect``): it must find exactly what RocksDB's
bindings load (``libclang.so`` or ``libclang-<n>.so``, loadable), never the ``libclang-cpp.so.<n>``
that the Debian image ships without ``libclang.so``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "setup.sh"


def real_library(pattern: str) -> Path:
    """A real, loadable shared library of this machine matching ``pattern`` (libclang-cpp is on
    the image; libclang-<n> is installed by setup before the tests run)."""
    for d in sorted(Path("/usr/lib").glob("llvm-*/lib"), reverse=True) + [Path("/usr/lib/x86_64-linux-gnu")]:
        for p in sorted(d.glob(pattern)):
            if p.exists():
                return p.resolve()
    raise AssertionError(f"no library matching {pattern} on this machine; run scripts/setup.sh first")


def detect(lib_dirs: list[Path] | None = None, libclang_path: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("LIBCLANG_PATH", "HITL_SETUP_LIB_DIRS")}
    if lib_dirs is not None:
        env["HITL_SETUP_LIB_DIRS"] = ":".join(str(d) for d in lib_dirs)
    if libclang_path is not None:
        env["LIBCLANG_PATH"] = libclang_path
    out = subprocess.run(["bash", str(SETUP), "--detect"], env=env, check=True, capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("libclang:")]
    assert len(lines) == 1, out.stdout
    return lines[0]


def test_only_libclang_cpp_is_missing(tmp_path: Path):
    cpp = real_library("libclang-cpp.so.*")
    (tmp_path / cpp.name).symlink_to(cpp)
    line = detect([tmp_path])
    assert line.startswith("libclang: missing"), line


def test_an_unversioned_libclang_cpp_is_missing_too(tmp_path: Path):
    (tmp_path / "libclang-cpp.so").symlink_to(real_library("libclang-cpp.so.*"))
    assert detect([tmp_path]).startswith("libclang: missing")


def test_a_file_that_does_not_load_is_missing(tmp_path: Path):
    (tmp_path / "libclang.so").write_bytes(b"not a library")
    assert detect([tmp_path]).startswith("libclang: missing")


@pytest.mark.parametrize("name", ["libclang.so", "libclang-14.so", "libclang-14.0.6.so"])
def test_a_loadable_libclang_is_found(tmp_path: Path, name: str):
    real = real_library("libclang-*.so.*[0-9]")
    (tmp_path / name).symlink_to(real)
    line = detect([tmp_path])
    assert line == f"libclang: found {tmp_path / name}", line


def test_libclang_path_is_honoured(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "libclang-cpp.so.14").symlink_to(real_library("libclang-cpp.so.*"))
    # LIBCLANG_PATH wins over the searched folders, in both directions.
    assert detect([real_library("libclang-*.so.*[0-9]").parent], libclang_path=str(empty)).startswith("libclang: missing")
    good = tmp_path / "good"
    good.mkdir()
    (good / "libclang.so").symlink_to(real_library("libclang-*.so.*[0-9]"))
    assert detect([empty], libclang_path=str(good)) == f"libclang: found {good / 'libclang.so'}"


def test_the_machine_itself_is_ready():
    """After setup ran, the real search finds libclang (this is what the build needs)."""
    assert shutil.which("bash")
    assert detect().startswith("libclang: found"), detect()
