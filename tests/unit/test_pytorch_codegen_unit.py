"""The pin-guard checker and the unit planning of PyTorch's `compile` level (fast: no builds)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lmsforge.verify.pytorch_codegen import guards, inputs, torchgen, units

EXCERPT = Path(__file__).resolve().parents[1] / "data" / "pytorch-codegen" / \
    "RegisterCUDA-excerpt.cpp"


@pytest.fixture
def excerpt() -> str:
    return EXCERPT.read_text()


def test_real_wrappers_are_all_guarded(excerpt: str) -> None:
    report = guards.check(excerpt)
    assert report.ok, report.missing
    assert report.wrappers == 8
    assert report.without_tensors == 1  # empty.memory_format: a factory
    assert report.structured_guarded == 3  # add, add.out, cat
    assert report.unstructured_guarded == 4


def test_parses_tensor_like_parameters(excerpt: str) -> None:
    wrappers = {w.name: w for w in guards.parse_wrappers(excerpt)}
    rnn = wrappers["wrapper_CUDA___cudnn_rnn"]
    assert rnn.tensor_params == ("input", "weight", "weight_buf", "hx", "cx", "dropout_state")
    assert not rnn.structured
    assert wrappers["wrapper_CUDA___index_put_impl_"].tensor_params == \
        ("self", "indices", "values")
    assert wrappers["wrapper_CUDA_cat"].tensor_params == ("tensors",)
    assert wrappers["wrapper_CUDA_cat"].structured
    assert wrappers["wrapper_CUDA_memory_format_empty"].tensor_params == ()
    # std::array<bool,3> holds a comma inside template brackets.
    layer_norm = wrappers["wrapper_CUDA__native_layer_norm_backward"]
    assert layer_norm.tensor_params == ("grad_out", "input", "mean", "rstd", "weight", "bias")


def test_split_params_respects_brackets() -> None:
    assert guards.split_params("::std::array<bool,3> m, const at::Tensor & x") == \
        ["::std::array<bool,3> m", "const at::Tensor & x"]


def _drop_guard(source: str, wrapper: str) -> str:
    start = source.index(f" {wrapper}(")
    guard = source.index("at::LmsPinGuard", start)
    line_start = source.rindex("\n", 0, guard) + 1
    line_end = source.index("\n", guard) + 1
    return source[:line_start] + source[line_end:]


@pytest.mark.parametrize("wrapper,kind", [("wrapper_CUDA_add_Tensor", "structured"),
                                          ("wrapper_CUDA___cudnn_rnn", "unstructured")])
def test_missing_guard_fails_naming_the_wrapper(excerpt: str, wrapper: str, kind: str) -> None:
    report = guards.check(_drop_guard(excerpt, wrapper))
    assert not report.ok
    assert report.missing == [f"{wrapper}: {kind} wrapper without at::LmsPinGuard"]


def test_guard_after_meta_fails(excerpt: str) -> None:
    moved = excerpt.replace(
        "const at::LmsPinGuard lms_pin_guard(tensors);\nstructured_cat_out_cuda_functional op;\n"
        "auto precompute = op.meta(tensors, dim);\n",
        "structured_cat_out_cuda_functional op;\nauto precompute = op.meta(tensors, dim);\n"
        "const at::LmsPinGuard lms_pin_guard(tensors);\n")
    assert moved != excerpt
    assert guards.check(moved).missing == ["wrapper_CUDA_cat: guard declared after op.meta(...)"]


def test_guard_missing_an_argument_fails(excerpt: str) -> None:
    partial = excerpt.replace("lms_pin_guard(self, indices, values)", "lms_pin_guard(self, values)")
    assert guards.check(partial).missing == \
        ["wrapper_CUDA___index_put_impl_: guard does not pin indices"]


def test_no_guard_anywhere_is_not_ok() -> None:
    source = "at::Tensor wrapper_CUDA_empty(c10::SymIntArrayRef size) {\n  return x;\n}\n"
    report = guards.check(source)
    assert report.missing == [] and not report.ok


def test_config_headers(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "aten/src/ATen/cuda").mkdir(parents=True)
    (tree / "aten/src/ATen/Config.h.in").write_text(
        "#define AT_MKL_ENABLED() @AT_MKL_ENABLED@\n#define AT_BLAS_F2C() @AT_BLAS_F2C@\n"
        "#define AT_PARALLEL_OPENMP @AT_PARALLEL_OPENMP@\n")
    (tree / "aten/src/ATen/cuda/CUDAConfig.h.in").write_text(
        "#define AT_CUDNN_ENABLED() @AT_CUDNN_ENABLED@\n"
        "#define NVCC_FLAGS_EXTRA \"@NVCC_FLAGS_EXTRA@\"\n")
    torchgen.write_config_headers(tree, tmp_path / "out")
    assert (tmp_path / "out/ATen/Config.h").read_text() == \
        "#define AT_MKL_ENABLED() 0\n#define AT_BLAS_F2C() 0\n#define AT_PARALLEL_OPENMP 1\n"
    assert (tmp_path / "out/ATen/cuda/CUDAConfig.h").read_text() == \
        "#define AT_CUDNN_ENABLED() 1\n#define NVCC_FLAGS_EXTRA \"\"\n"


def test_plan_and_byte_compile_follow_the_series(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tree / "README").write_text("base\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    base = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    files = {"c10/core/A.cpp": "", "c10/test/core/A_test.cpp": "", "test/test_x.py": "x = 1\n",
             "torch/csrc/B.cpp": "", "aten/src/ATen/native/cudnn/C.cpp": "",
             "aten/src/ATen/test/D.cpp": "", "torch/ok.py": "y = 2\n",
             "aten/src/ATen/templates/RegisterDispatchKey.cpp": "",
             "torch/bad.py": "def f(:\n", "aten/src/ATen/E.h": ""}
    for path, text in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "series"], check=True)

    touched = units.touched_files(tree, base)
    plan = units.plan(tree, touched, [tmp_path / "gen/ATen/RegisterCUDA.cpp"])
    assert [unit.name for unit in plan] == ["aten/src/ATen/native/cudnn/C.cpp",
                                            "torch/csrc/B.cpp",
                                            "generated: ATen/RegisterCUDA.cpp"]
    compiled, failures = units.byte_compile(tree, touched)
    assert compiled == ["test/test_x.py", "torch/ok.py"]
    assert len(failures) == 1 and failures[0].startswith("torch/bad.py:1:")
    assert not list(tree.rglob("__pycache__"))


def test_a_tree_without_the_series_history_is_not_checked(tmp_path: Path) -> None:
    from lmsforge.verify.pytorch_codegen import check

    assert units.touched_files(tmp_path, "0" * 40) is None
    result = check.run(tmp_path, "0" * 40, tmp_path / "work", tmp_path / "c10", tmp_path / "cache",
                       1, tmp_path / "log", say=lambda _: None)
    assert result.failures == [] and result.compiled == []
    assert result.summary().startswith("codegen checks not run: no git history")


def test_first_error_picks_the_compiler_error() -> None:
    output = "In file included from x.h:1,\nfoo.cpp:3:5: error: 'bar' was not declared\n"
    assert units.first_error(output) == "foo.cpp:3:5: error: 'bar' was not declared"


# What 1.13.1's torchgen generates: wrappers named wrapper_<overload>_<op>, not wrapper_CUDA_<op>.
WRAPPERS_1_13 = """\
at::Tensor wrapper_sgn(const at::Tensor & self) {
const at::LmsPinGuard lms_pin_guard(self);
structured_sgn_out_functional op;
op.meta(self);
return std::move(op.outputs_[0]).take();
}
at::Tensor wrapper_memory_format_empty(c10::SymIntArrayRef size, c10::optional<bool> pin_memory) {
  return at::native::empty_cuda(c10::asIntArrayRefSlow(size), pin_memory);
}
const at::Tensor & wrapper__resize_(const at::Tensor & self, c10::SymIntArrayRef size) {
  const at::LmsPinGuard lms_pin_guard(self);
  return at::native::resize_cuda_(self, c10::asIntArrayRefSlow(size));
}
"""


def test_wrappers_of_1_13_are_checked() -> None:
    report = guards.check(WRAPPERS_1_13)
    assert report.ok and report.wrappers == 3 and report.without_tensors == 1
    assert (report.structured_guarded, report.unstructured_guarded) == (1, 1)
    unguarded = WRAPPERS_1_13.replace("  const at::LmsPinGuard lms_pin_guard(self);\n", "")
    assert guards.check(unguarded).missing == \
        ["wrapper__resize_: unstructured wrapper without at::LmsPinGuard"]


@pytest.mark.parametrize("has_aoti", [True, False])
def test_torchgen_command_follows_the_trees_options(tmp_path: Path, has_aoti: bool) -> None:
    """2.x's gen.py needs --aoti-install-dir; 1.13.1's refuses it."""
    (tmp_path / "torchgen").mkdir()
    (tmp_path / "torchgen/gen.py").write_text(
        'parser.add_argument("--aoti-install-dir")\n' if has_aoti
        else "parser.add_argument('-s')\n")
    command = torchgen.command(tmp_path, tmp_path / "out")
    assert ("--aoti-install-dir" in command) == has_aoti
    assert "--per-operator-headers" in command


@pytest.mark.parametrize("cmake, standard", [
    ("set(CMAKE_CXX_STANDARD 14 CACHE STRING \"x\")\n", 14),  # 1.13.1
    ("set(CMAKE_CXX_STANDARD\n    17\n    CACHE)\n", 17),  # 2.6.0
    (None, 17)])
def test_units_compile_with_the_trees_standard(tmp_path: Path, cmake: str | None,
                                               standard: int) -> None:
    """1.13.1 is C++14: a C++17 feature in the series must fail the syntax compile."""
    if cmake is not None:
        (tmp_path / "CMakeLists.txt").write_text(cmake)
    cxx_flags = units.flags(tmp_path, tmp_path, tmp_path, [], tmp_path)
    assert cxx_flags[0] == f"-std=c++{standard}"
    # gcc only warns about C++17 language features under -std=c++14.
    assert ("-Werror=c++17-extensions" in cxx_flags) == (standard < 17)


@pytest.mark.parametrize("descriptors, cudnn", [
    ("#if defined(CUDNN_VERSION) && CUDNN_VERSION >= 90000\n", "9.27.0.42"),  # 2.6.0
    ("AT_CUDNN_CHECK(cudnnSetRNNDescriptor_v6(\n#if CUDNN_VERSION >= 8000\n", "8.9.7.29"),
    (None, "9.27.0.42")])
def test_a_tree_before_cudnn_9_gets_cudnn_8_headers(tmp_path: Path, descriptors: str | None,
                                                    cudnn: str) -> None:
    if descriptors is not None:
        (tmp_path / "aten/src/ATen/cudnn").mkdir(parents=True)
        (tmp_path / "aten/src/ATen/cudnn/Descriptors.h").write_text(descriptors)
    wheels = inputs.wheels_for(tmp_path)
    assert [w.version for w in wheels if w.name.startswith("nvidia-cudnn-cu")] == [cudnn]
    assert len(wheels) == len(inputs.WHEELS)
