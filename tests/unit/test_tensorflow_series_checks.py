"""The compile level's checks of a TensorFlow series that need no compiler: the Bazel file lists
(finding 6 of the v2.14.1 review) and the proto fields (findings 7 and 8), on small trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsforge.verify.tensorflow_tf import bazel_lists, proto_fields


def _write(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


UPSTREAM = {
    "tensorflow/pkg/up.h": '#include "tensorflow/pkg/new.h"\n',
    "tensorflow/pkg/up.cc": '#include "tensorflow/pkg/up.h"\n',
}
NEW = {
    "tensorflow/pkg/new.h": "// new\n",
    "tensorflow/pkg/new.cc": '#include "tensorflow/pkg/new.h"\n',
}
ADDED = sorted(NEW)
MODIFIED = sorted(UPSTREAM)


def _tree(tmp_path: Path, build: str, extra: dict[str, str] | None = None) -> Path:
    _write(tmp_path, {**UPSTREAM, **NEW, "tensorflow/pkg/BUILD": build, **(extra or {})})
    return tmp_path


def _missing(tree: Path) -> set[tuple[str, str]]:
    report = bazel_lists.check(tree, ADDED, MODIFIED)
    return {(m.where, Path(m.needed).name) for m in report.missing}


def test_new_files_are_needed_where_their_includers_are(tmp_path: Path) -> None:
    needs = bazel_lists.needed_new_files(_tree(tmp_path, ""), ADDED, set(ADDED + MODIFIED))
    assert needs["tensorflow/pkg/up.h"] == {"tensorflow/pkg/new.h"}
    assert needs["tensorflow/pkg/up.cc"] == {"tensorflow/pkg/new.h", "tensorflow/pkg/new.cc"}


def test_a_rule_gets_new_files_from_its_own_lists_or_unconditional_deps(tmp_path: Path) -> None:
    tree = _tree(tmp_path, """
cc_library(name = "new", srcs = ["new.cc"], hdrs = ["new.h"])
cc_library(name = "up", srcs = ["up.cc"], hdrs = ["up.h"], deps = [":new"])
cc_library(name = "selected", srcs = ["up.cc"], deps = select({"//c": [":new"]}))
""")
    assert _missing(tree) == {('cc_library "selected" srcs/hdrs', "new.h"),
                              ('cc_library "selected" srcs/hdrs', "new.cc")}


def test_a_filegroup_needs_the_files_unless_every_user_rule_has_them(tmp_path: Path) -> None:
    tree = _tree(tmp_path, """
cc_library(name = "new", srcs = ["new.cc"], hdrs = ["new.h"])
filegroup(name = "private_hdrs", srcs = ["up.h"])
cc_library(name = "impl", srcs = ["up.cc"], hdrs = [":private_hdrs"], deps = [":new"])
filegroup(name = "mobile_srcs", srcs = ["up.cc", "up.h"])
""")
    assert _missing(tree) == {('filegroup "mobile_srcs"', "new.h"),
                              ('filegroup "mobile_srcs"', "new.cc")}


def test_dropping_one_new_header_from_a_list_is_found(tmp_path: Path) -> None:
    complete = """
filegroup(name = "mobile_srcs", srcs = ["new.cc", "new.h", "up.cc", "up.h"])
exports_files(["new.h", "up.h"])
"""
    assert _missing(_tree(tmp_path, complete)) == set()
    dropped = complete.replace('"new.cc", "new.h", ', '"new.cc", ')
    assert _missing(_tree(tmp_path, dropped)) == {('filegroup "mobile_srcs"', "new.h")}


def test_an_exported_includer_needs_its_new_header_exported_or_grouped(tmp_path: Path) -> None:
    tree = _tree(tmp_path, 'exports_files(["up.h"])\n')
    assert _missing(tree) == {("exports_files", "new.h")}
    grouped = _tree(tmp_path, 'exports_files(["up.h"])\nfilegroup(name = "h", srcs = ["new.h"])\n')
    assert _missing(grouped) == set()


def test_textual_headers_provide_but_impose_nothing(tmp_path: Path) -> None:
    tree = _tree(tmp_path, 'cc_library(name = "pywrap", textual_hdrs = ["up.h"])\n')
    assert _missing(tree) == set()


def test_lists_follow_variables_globs_and_nested_filegroups(tmp_path: Path) -> None:
    tree = _tree(tmp_path, """
MOBILE = glob(["**/*.cc", "**/*.h"], exclude = ["gpu/**/*", "new.*"])
filegroup(name = "inner", srcs = MOBILE)
filegroup(name = "outer", srcs = [":inner"])
""", {"tensorflow/pkg/gpu/skipped.cc": "", "tensorflow/pkg/sub/BUILD": "",
      "tensorflow/pkg/sub/other_package.cc": ""})
    missing = _missing(tree)
    assert ('filegroup "outer"', "new.h") in missing  # the outer list holds up.* through inner
    assert ("list MOBILE", "new.cc") in missing
    index = bazel_lists._BuildIndex(tree)
    inner = next(u for u in index.units if u.target == "inner")
    assert inner.files == {"tensorflow/pkg/up.cc", "tensorflow/pkg/up.h"}  # no gpu/, sub/


def test_a_companion_source_belongs_where_the_upstream_source_is(tmp_path: Path) -> None:
    _write(tmp_path, {"tensorflow/pkg/alloc.h": "", "tensorflow/pkg/alloc.cc": "",
                      "tensorflow/pkg/alloc_lms.cc": '#include "tensorflow/pkg/alloc.h"\n',
                      "tensorflow/pkg/BUILD": 'filegroup(name = "m", srcs = ["alloc.cc"])\n'})
    report = bazel_lists.check(tmp_path, ["tensorflow/pkg/alloc_lms.cc"],
                               ["tensorflow/pkg/alloc.h", "tensorflow/pkg/alloc.cc"])
    assert [Path(m.needed).name for m in report.missing] == ["alloc_lms.cc"]
    assert "BUILD:1" in str(report.missing[0])


PROTO = """
syntax = "proto3";
// message Ignored { int32 commented_out = 1; }
message GPUOptions {
  double per_process_gpu_memory_fraction = 1;
  message Experimental {
    message VirtualDevices { repeated float memory_limit_mb = 1; }
    repeated VirtualDevices virtual_devices = 1;
    reserved 6;
    enum Kind { A = 0; B = 1; }
    oneof choice { bool use_unified_memory = 2; }
    map<string, int32> knobs = 3;
    /* block comment */ bool gpu_host_mem_disallow_growth = 14;
  }
  Experimental experimental = 9;
}
"""


def test_parse_proto_reads_nested_messages_oneofs_and_maps() -> None:
    fields = proto_fields.parse_proto(PROTO)
    assert fields["GPUOptions"] == {"per_process_gpu_memory_fraction": 1, "experimental": 9}
    assert fields["GPUOptions.Experimental"] == {
        "virtual_devices": 1, "use_unified_memory": 2, "knobs": 3,
        "gpu_host_mem_disallow_growth": 14}
    assert fields["GPUOptions.Experimental.VirtualDevices"] == {"memory_limit_mb": 1}
    assert "Ignored" not in fields


def _golden(fields: str) -> str:
    return ('path: "tensorflow.GPUOptions"\ntf_proto {\n  descriptor {\n    name: "GPUOptions"\n'
            '    field { name: "per_process_gpu_memory_fraction" number: 1 }\n'
            '    field { name: "experimental" number: 9 }\n'
            '    nested_type {\n      name: "Experimental"\n' + fields + "    }\n  }\n}\n")


EXPERIMENTAL_GOLDEN = "".join(
    f'      field {{ name: "{n}" number: {v} label: LABEL_OPTIONAL }}\n' for n, v in
    [("virtual_devices", 1), ("use_unified_memory", 2), ("knobs", 3),
     ("gpu_host_mem_disallow_growth", 14)])


@pytest.mark.parametrize("number,expected", [
    (15, {"takes a number upstream will reach", "lacks lms_enabled = 15"}),
    (1001, {"lacks lms_enabled = 1001"}),
])
def test_added_fields_need_a_high_number_and_a_golden(tmp_path: Path, number: int,
                                                      expected: set[str]) -> None:
    proto = "tensorflow/core/protobuf/config.proto"
    golden = "tensorflow/tools/api/golden/v1/tensorflow.-g-p-u-options.pbtxt"
    patched = PROTO.replace("= 14;", f"= 14;\n    bool lms_enabled = {number};")
    _write(tmp_path, {proto: patched, golden: _golden(EXPERIMENTAL_GOLDEN)})
    problems = [str(p) for p in proto_fields.check(tmp_path, [proto], lambda path: PROTO)]
    assert {e for e in expected if any(e in p for p in problems)} == expected
    assert len(problems) == len(expected)
    fixed = EXPERIMENTAL_GOLDEN + f'      field {{ name: "lms_enabled" number: {number} }}\n'
    _write(tmp_path, {golden: _golden(fixed)})
    remaining = [str(p) for p in proto_fields.check(tmp_path, [proto], lambda path: PROTO)]
    assert len(remaining) == (1 if number < 1000 else 0)


def test_text_format_reads_repeated_keys_and_escapes() -> None:
    parsed = proto_fields.parse_text_format('a { n: "x\\"y" } a { n: "z" } b: 3')
    assert parsed == {"a": [{"n": 'x"y'}, {"n": "z"}], "b": "3"}


def test_compile_level_fails_on_a_list_before_running_any_compiler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from lmsforge.frameworks import tensorflow
    from lmsforge.verify.levels import FAIL, LevelContext

    def no_compiler(*args: object, **kwargs: object) -> None:
        raise AssertionError("the compile level ran a tool after a list check failed")

    monkeypatch.setattr(tensorflow.inputs, "ensure_protoc", no_compiler)
    monkeypatch.setattr(tensorflow.inputs, "unpacked_wheel", no_compiler)
    tree = tmp_path / "tree"
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t.invalid", "GIT_CONFIG_GLOBAL": "/dev/null",
           "PATH": "/usr/bin:/bin"}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tree, env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    _write(tree, {"tensorflow/pkg/up.h": "// upstream\n", "tensorflow/pkg/up.cc": "",
                  "tensorflow/pkg/BUILD": 'filegroup(name = "mobile", srcs = ["up.h"])\n'})
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "upstream")
    base = git("rev-parse", "HEAD")
    _write(tree, {**UPSTREAM, **NEW})
    git("add", "-A")
    git("commit", "-qm", "series")
    result = tensorflow.run_level("compile", LevelContext("tensorflow", "v2.14.1", tree, base,
                                                          tmp_path / "work", say=lambda s: None))
    assert result.status == FAIL
    assert result.detail.startswith("Bazel lists lack 1 entries for files the series adds")
    assert 'filegroup "mobile" has tensorflow/pkg/up.h but not tensorflow/pkg/new.h' in \
        result.detail
