"""The one place that calls the LMS series' Python API, ``tf.config.experimental``'s
``set_lms_enabled``, ``get_lms_enabled`` and ``get_lms_stats`` (patch 0100 of the TensorFlow
series). Everything else in this package goes through here, so a stock TensorFlow fails in one
place, with one line, and a test can stand in for the three functions."""

from __future__ import annotations

NO_LMS_BUILD = ("this TensorFlow has no Large Model Support: install an lmsforge LMS build "
                "(conda install -c <channel> tensorflow), see docs/tensorflow-lms.md")


class LmsUnavailableError(RuntimeError):
    """The running TensorFlow was built without lmsforge's LMS series."""


# Tracebacks name it as users import it: tensorflow_large_model_support.LmsUnavailableError.
LmsUnavailableError.__module__ = "tensorflow_large_model_support"


CONF_VARIABLE = "TF_LMS_CONF"


def _parse_conf(text: str) -> dict[str, str]:
    """TF_LMS_CONF's `key:value` pairs (`=` works too); the series checks the values."""
    pairs = {}
    for item in text.split(","):
        key, sep, value = item.replace("=", ":", 1).partition(":")
        if key.strip():
            pairs[key.strip()] = value.strip() if sep else ""
    return pairs


# What the user set before any LMS object: their TF_LMS_CONF keys win over LMS's arguments.
_USER_CONF = None


def apply_settings(settings: dict[str, str | None]) -> list[str]:
    """Puts SETTINGS (TF_LMS_CONF keys; None: back to the series' default) into TF_LMS_CONF,
    which the series reads when LMS is enabled on a GPU, so call it before the GPUs initialize.
    Keys the user's own TF_LMS_CONF sets keep the user's value; returns those keys."""
    import os
    global _USER_CONF
    if _USER_CONF is None:
        _USER_CONF = _parse_conf(os.environ.get(CONF_VARIABLE, ""))
    conf = _parse_conf(os.environ.get(CONF_VARIABLE, ""))
    kept = []
    for key, value in settings.items():
        if key in _USER_CONF:
            if value is not None and value != _USER_CONF[key]:
                kept.append(key)
        elif value is None:
            conf.pop(key, None)
        else:
            conf[key] = value
    if conf:
        os.environ[CONF_VARIABLE] = ",".join(f"{key}:{value}" for key, value in conf.items())
    else:
        os.environ.pop(CONF_VARIABLE, None)
    return kept


def _experimental():
    import tensorflow as tf  # late: importing this package must not start TensorFlow
    return tf.config.experimental


def has_lms() -> bool:
    """Whether this TensorFlow carries the series' API (an lmsforge LMS build)."""
    return hasattr(_experimental(), "set_lms_enabled")


def _require_lms():
    experimental = _experimental()
    if not hasattr(experimental, "set_lms_enabled"):
        raise LmsUnavailableError(NO_LMS_BUILD)
    return experimental


def enable() -> None:
    """Turns LMS on. The series raises RuntimeError (one line) once the GPUs exist; it passes
    through unchanged, because its text already says what to do."""
    _require_lms().set_lms_enabled(True)


def is_enabled() -> bool:
    """False on a stock TensorFlow; else what the series reports (the allocators once the GPUs
    exist, what was asked for before)."""
    if not has_lms():
        return False
    return bool(_experimental().get_lms_enabled())


def stats(device: str) -> dict[str, int]:
    """The series' LMS statistics of DEVICE ("GPU:0"), as a plain dict."""
    return dict(_require_lms().get_lms_stats(device))


def session_config(config=None):
    """A tf.compat.v1.ConfigProto (CONFIG, or a new one) with the series' LMS field set
    (``gpu_options.experimental.lms_enabled``, field 1001)."""
    import tensorflow as tf
    if config is None:
        config = tf.compat.v1.ConfigProto()
    _require_lms()
    try:
        config.gpu_options.experimental.lms_enabled = True
    except AttributeError:
        # The Python API is there but the proto field is not: not a whole LMS build.
        raise LmsUnavailableError(NO_LMS_BUILD + " (ConfigProto has no lms_enabled field)") from None
    return config


def device_name(gpu_device: str | None) -> str:
    """TFLMSv2's gpu_device ("/device:GPU:2", "/gpu:1", None) as the series' device string."""
    if gpu_device is None:
        return "GPU:0"
    if not isinstance(gpu_device, str):
        raise TypeError(f"gpu_device must be a device string such as '/device:GPU:0', not {gpu_device!r}")
    name = gpu_device.rsplit("device:", 1)[-1].lstrip("/")
    kind, _, index = name.partition(":")
    if kind.upper() != "GPU" or not index.isdigit():
        raise ValueError(f"gpu_device must name a GPU such as '/device:GPU:0', not {gpu_device!r}")
    return f"GPU:{int(index)}"
