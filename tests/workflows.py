"""Reading the GitHub Actions workflows in ci/, for the tests that check them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

CI = Path(__file__).resolve().parents[1] / "ci"
WORKFLOWS = sorted(CI.glob("*.yml"))
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.DOTALL)  # a `${{ ... }}` expression


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())
