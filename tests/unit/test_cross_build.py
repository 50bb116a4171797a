"""The pieces of the linux-ppc64le cross build and emulated tests that need no build."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from lmsforge.cli import main
from lmsforge.packaging import emulation, sysroot, toolchain


def test_ppc64le_toolchain_file_uses_the_cross_compiler_and_only_target_libraries(tmp_path):
    text = toolchain.cmake_toolchain(toolchain.DECLARED["linux-ppc64le"], tmp_path / "root")
    assert "set(CMAKE_CXX_COMPILER powerpc64le-linux-gnu-g++)" in text
    assert "set(CMAKE_SYSTEM_PROCESSOR ppc64le)" in text
    assert f'set(CMAKE_FIND_ROOT_PATH "{tmp_path / "root"}" "/usr/powerpc64le-linux-gnu")' in text
    for kind in ("LIBRARY", "INCLUDE", "PACKAGE"):
        assert f"set(CMAKE_FIND_ROOT_PATH_MODE_{kind} ONLY)" in text


def test_ppc64le_declares_its_debian_inputs():
    declared = toolchain.DECLARED["linux-ppc64le"]
    assert declared.debian_packages == ("g++-powerpc64le-linux-gnu",)
    assert declared.target_arch == "ppc64el"
    assert {"libfmt-dev", "libcpuinfo-dev", "libcpuinfo0", "libgtest-dev"} <= \
        set(declared.sysroot_packages)
    assert set(toolchain.DECLARED["linux-64"].debian_packages) == \
        {"libfmt-dev", "libcpuinfo-dev", "libgtest-dev"}


def test_cross_toolchain_metadata_names_compiler_origin_and_sysroot(tmp_path):
    root = sysroot.Sysroot(tmp_path, "ppc64el", ("bookworm", "bookworm-updates"),
                           {"libfmt-dev": "9.1.0+ds1-2", "libcpuinfo0": "0.0~git1"})
    tools = toolchain.Toolchain("linux-ppc64le", "powerpc64le-linux-gnu-g++ 12.2.0", "linux-64",
                                root, tmp_path / "t.cmake")
    facts = tools.metadata()
    assert facts["platform"] == "linux-ppc64le"
    assert facts["toolchain"] == "powerpc64le-linux-gnu-g++ 12.2.0 (cross from linux-64)"
    assert facts["sysroot"] == ("Debian bookworm bookworm-updates ppc64el: "
                                "libcpuinfo0 0.0~git1, libfmt-dev 9.1.0+ds1-2")


def test_a_sysroot_without_a_readable_manifest_is_not_used(tmp_path):
    path = sysroot.sysroot_dir(tmp_path, "ppc64el", ["libfmt-dev"], "bookworm")
    path.mkdir(parents=True)
    (path / sysroot.MANIFEST).write_text("{not json")
    assert sysroot._load(path) is None
    assert path != sysroot.sysroot_dir(tmp_path, "ppc64el", ["libfmt-dev", "libgtest-dev"],
                                       "bookworm")


def test_no_qemu_on_path_means_no_emulator_and_one_line_saying_what_to_install(monkeypatch,
                                                                               tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert emulation.needed("linux-ppc64le") and not emulation.needed("linux-64")
    assert emulation.find("linux-ppc64le") is None
    why = emulation.missing("linux-ppc64le")
    assert "no qemu-ppc64le on PATH" in why and "apt-get install qemu-user" in why
    assert "\n" not in why


def test_emulator_launcher_runs_the_program_under_qemu_with_the_target_root():
    emulator = emulation.Emulator("linux-ppc64le", Path("/usr/bin/qemu-ppc64le"),
                                  Path("/usr/powerpc64le-linux-gnu"))
    assert emulator.launcher() == ("/usr/bin/qemu-ppc64le", "-L", "/usr/powerpc64le-linux-gnu")


def test_build_with_an_empty_channel_is_a_usage_error_that_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["build", "--framework", "pytorch", "--tag", "v2.6.0",
                                       "--channel", ""])
    assert result.exit_code == 2
    assert "--channel" in result.output and "must not be empty" in result.output
    assert [p.name for p in tmp_path.iterdir() if p.name != "cache"] == []


def test_doctor_reports_each_platform_and_warns_when_ppc64le_tests_cannot_run(monkeypatch,
                                                                              tmp_path):
    from lmsforge.commands import doctor

    checks = {c.name: c for c in doctor.platform_checks(tmp_path)}
    assert {"linux-64 build", "CUDA toolkit", "linux-ppc64le build",
            "CUDA toolkit (linux-ppc64le)", "linux-ppc64le tests"} == set(checks)
    assert "g++-powerpc64le-linux-gnu" in checks["linux-ppc64le build"].detail or \
        checks["linux-ppc64le build"].status == doctor.OK
    assert "sysroot not cached yet" in checks["linux-ppc64le build"].detail
    assert checks["CUDA toolkit (linux-ppc64le)"].status == doctor.WARN
    monkeypatch.setenv("PATH", str(tmp_path))
    [tests] = [c for c in doctor.platform_checks(tmp_path) if c.name == "linux-ppc64le tests"]
    assert tests.status == doctor.WARN and "never a pass" in tests.detail
