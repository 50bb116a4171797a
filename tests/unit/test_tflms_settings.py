"""tensorflow_large_model_support's path from LMS's arguments to the allocator's settings
(TF_LMS_CONF, read by the series when LMS is enabled on a GPU): pure Python, no TensorFlow."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "packages" / "tensorflow-large-model-support"


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(PACKAGE))
    module = importlib.import_module("tensorflow_large_model_support._backend")
    monkeypatch.setattr(module, "_USER_CONF", None)  # a fresh process
    return module


def test_settings_land_in_tf_lms_conf_and_none_restores_the_default(
        backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_LMS_CONF", raising=False)
    assert backend.apply_settings({"sync_mode": "1", "swapin_ahead": "0"}) == []
    assert backend.CONF_VARIABLE == "TF_LMS_CONF"
    assert os.environ["TF_LMS_CONF"] == "sync_mode:1,swapin_ahead:0"
    # A later LMS object before the GPUs start wins; None takes its key out again.
    backend.apply_settings({"sync_mode": "3", "swapin_ahead": None})
    assert os.environ["TF_LMS_CONF"] == "sync_mode:3"
    backend.apply_settings({"sync_mode": None})
    assert "TF_LMS_CONF" not in os.environ


def test_the_users_own_keys_win_and_are_reported(backend,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_LMS_CONF", "swapin_ahead=25%, sync_mode:0")
    kept = backend.apply_settings({"sync_mode": "3", "swapin_ahead": None})
    assert kept == ["sync_mode"]
    assert backend._parse_conf(os.environ["TF_LMS_CONF"]) == {"swapin_ahead": "25%",
                                                              "sync_mode": "0"}
    # The same value as the user's is no conflict.
    assert backend.apply_settings({"sync_mode": "0"}) == []
