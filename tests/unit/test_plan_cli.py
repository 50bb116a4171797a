"""`lmsforge plan`'s bad inputs: one line, exit code 2, before any build or replay (the cache
stays empty). The answers themselves need the replay's build: tests/integration/
test_plan_replay.py."""

from __future__ import annotations

import pytest

from fixtures import lmsforge, one_line_error

UNTRACEABLE = '''
import torch


class Picky(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return y[y > 0].sum().reshape(1, 1).expand(x.shape[0], 2)


def build():
    return Picky()


def not_a_model():
    return 42


def narrow():
    return torch.nn.Linear(4, 2)
'''


@pytest.mark.parametrize("args, message", [
    (["--model", "resnet50", "--input", "3xx"], "--input '3xx': expected sizes"),
    (["--model", "resnet50", "--gpu", "h800"], "unknown GPU profile 'h800'; known: h100-pcie"),
    (["--model", "resnet50", "--gpu-memory", "lots"], "--gpu-memory 'lots': expected a size"),
    (["--model", "resnet50", "--batch", "0"], "--batch 0: must be at least 1"),
    (["--model", "torchvision:resnet18", "--input", "3x64x64"], "torchvision"),
    (["--model", "nowhere_at_all:build", "--input", "4"], "cannot import nowhere_at_all"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, isolated_env):
    result = lmsforge("plan", *args)
    assert result.exit_code == 2, result.output
    assert message in one_line_error(result)
    assert not isolated_env.exists()  # refused before anything was built


def test_plot_into_a_folder_is_refused(tmp_path, isolated_env):
    result = lmsforge("plan", "--model", "resnet50", "--plot", str(tmp_path))
    assert result.exit_code == 2
    assert f"--plot {tmp_path} is a folder" in one_line_error(result)


def test_an_untraceable_model_gets_one_line_naming_the_operator(tmp_path, monkeypatch,
                                                                 isolated_env):
    (tmp_path / "picky_model_for_plan.py").write_text(UNTRACEABLE)
    monkeypatch.chdir(tmp_path)
    result = lmsforge("plan", "--model", "picky_model_for_plan:build", "--input", "4",
                      "--batch", "2")
    assert result.exit_code == 2, result.output
    assert one_line_error(result) == (
        "lmsforge: error: cannot trace picky_model_for_plan:build: operator "
        "aten.index.Tensor is not traceable (its output shape depends on tensor values)")
    assert not isolated_env.exists()
    result = lmsforge("plan", "--model", "picky_model_for_plan:not_a_model", "--input", "4")
    assert result.exit_code == 2
    assert "not_a_model() returned int, not a torch.nn.Module" in one_line_error(result)
    # An input the model's own layers refuse: theirs to say, in one line.
    result = lmsforge("plan", "--model", "picky_model_for_plan:narrow", "--input", "5")
    assert result.exit_code == 2
    assert one_line_error(result).startswith(
        "lmsforge: error: cannot trace picky_model_for_plan:narrow: the step raised "
        "RuntimeError: a and b must have same reduction dim, but got [1, 5] X [4, 2]")
