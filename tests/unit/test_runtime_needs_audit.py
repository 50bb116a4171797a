"""The audit of a core package's runtime needs (packaging/rattler._audit_runtime_needs) on real
binaries of this machine: a library that neither the package nor every system has, or a glibc
floor below what a binary uses, fails the build with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsforge.errors import CheckFailed
from lmsforge.packaging import rattler as build
from lmsforge.packaging import runtime_needs

TRUE = Path("/bin/true")  # loads libc.so.6 only
LS = Path("/bin/ls")  # loads libselinux.so.1 too


def _package(tmp_path: Path, depends: list[str], **files: Path):
    contents = build.PackageContents({"depends": depends}, {},
                                     {name.replace("__", "/"): path.read_bytes()
                                      for name, path in files.items()})
    return build.BuiltPackage(tmp_path / "p-1-0.conda", "p", "1", "0", "linux-64", 1), contents


def _newest_glibc(path: Path) -> str:
    needs = runtime_needs.elf_needs(path.read_bytes())
    assert needs.glibc, f"{path} uses no versioned glibc symbol"
    return needs.glibc


def test_a_binary_whose_libraries_are_all_there_passes(tmp_path):
    floor = _newest_glibc(TRUE)
    package, contents = _package(tmp_path, [f"__glibc >={floor}"], bin__true=TRUE)
    line = build._audit_runtime_needs(package, contents)
    assert f"needs glibc {floor}" in line


def test_a_library_neither_shipped_nor_on_every_system_fails(tmp_path):
    if "libselinux.so.1" not in runtime_needs.elf_needs(LS.read_bytes()).libraries:
        pytest.skip(f"{LS} here does not load libselinux")
    package, contents = _package(tmp_path, ["__glibc >=9.99"], bin__ls=LS)
    with pytest.raises(CheckFailed, match="bin/ls loads libselinux.so.1, which the package "
                                          "neither carries nor declares"):
        build._audit_runtime_needs(package, contents)


@pytest.mark.parametrize("depends", [[], ["__glibc >=2.0"]], ids=["none", "too-low"])
def test_a_glibc_floor_below_what_a_binary_uses_fails(tmp_path, depends):
    package, contents = _package(tmp_path, depends, bin__true=TRUE)
    with pytest.raises(CheckFailed, match=f"need glibc {_newest_glibc(TRUE)} but the package "
                                          "declares"):
        build._audit_runtime_needs(package, contents)


def test_the_toolchain_glibc_is_the_c_library_the_compiler_links_against():
    assert runtime_needs.version_key(runtime_needs.glibc_of("c++")) >= \
        runtime_needs.version_key(_newest_glibc(TRUE))
