"""``LMS``: TFLMSv2's object, on lmsforge's allocator LMS.

TFLMSv2 rewrote the graph with swap operations. lmsforge's series pages tensors in the GPU
allocator instead, and today has one switch, on or off. So ``LMS``:

- turns LMS on when it is constructed, because the switch must precede GPU initialization (the
  series raises its one-line RuntimeError when it is too late; a stock TensorFlow raises
  ``LmsUnavailableError``);
- accepts TFLMSv2's knobs with TFLMSv2's checks, passes ``sync_mode`` and ``swapin_ahead=0``
  to the allocator (TF_LMS_CONF), and says once per other knob and process what it does here;
- maps ``serialization`` to inter-op parallelism 1 (see docs/tensorflow-lms.md, "TFLMSv2 users");
- is one object that is both a Keras callback and an Estimator ``SessionRunHook``, as TFLMSv2's
  was, and has ``run()`` for tf.compat.v1 sessions.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import tensorflow as tf

from . import _backend
from .knobs import AUTO, Knobs
from .stats import StatsCsvLogger, StepStats

log = logging.getLogger("tensorflow_large_model_support")

_GIB = 1 << 30


class LMSWarning(UserWarning):
    """An LMS argument that is accepted but does less here than in TFLMSv2."""


_warned: set[str] = set()  # one warning per knob per process, however many LMS objects


def _warn_once(knob: str, message: str) -> None:
    if knob in _warned:
        return
    _warned.add(knob)
    warnings.warn(f"[LMS] {message}", LMSWarning, stacklevel=4)


_NOT_YET = ("has no allocator setting in this TensorFlow LMS (it pages tensors in and out "
            "whole, one at a time); accepted and ignored")


def _check_serialization(serialization) -> list:
    if serialization is None:
        return []
    if isinstance(serialization, (str, bytes)) or not isinstance(serialization, (list, tuple)):
        raise TypeError("serialization must be a list of level indices and 'start:stop' strings, "
                        f"not {serialization!r}")
    for item in serialization:
        ok = (type(item) is int and item >= 0) or (
            isinstance(item, str) and all(part.strip().isdigit() or part.strip() == ""
                                          for part in item.split(":")) and item.count(":") <= 2)
        if not ok:
            raise ValueError(f"serialization entries must be level indices >= 0 or slice strings "
                             f"such as '3:5', not {item!r}")
    return list(serialization)


class LMS(tf.keras.callbacks.Callback, tf.compat.v1.train.SessionRunHook):
    """Large Model Support, with TFLMSv2's arguments: same names, defaults and positional order
    (TFLMSv2's ``lms.py`` puts ``swapin_groupby`` before ``swapin_ahead``)."""

    def __init__(self, swapout_threshold=-1, swapin_groupby=-1, swapin_ahead=-1, sync_mode=0,
                 serialization=(), serialization_by_size=0, debug=False, debug_level=1,
                 cpu_device="/cpu:0", gpu_device=None):
        super().__init__()
        # Check everything before touching TensorFlow: bad input changes nothing.
        self.knobs = Knobs(swapout_threshold=swapout_threshold, swapin_ahead=swapin_ahead,
                           swapin_groupby=swapin_groupby, sync_mode=sync_mode)
        self._serialization = _check_serialization(serialization)
        if type(serialization_by_size) not in (int, float) or serialization_by_size < 0:
            raise ValueError("serialization_by_size must be a size in GiB >= 0 (0 = off), "
                             f"not {serialization_by_size!r}")
        if type(debug) is not bool:
            raise TypeError(f"debug must be True or False, not {debug!r}")
        if type(debug_level) is not int or debug_level not in (1, 2):
            raise ValueError(f"debug_level must be 1 or 2, not {debug_level!r}")
        if not isinstance(cpu_device, str):
            raise TypeError(f"cpu_device must be a device string, not {cpu_device!r}")
        self._device = _backend.device_name(gpu_device)
        self._serialization_by_size = serialization_by_size
        self._debug, self._debug_level = debug, debug_level
        self._cpu_device, self._gpu_device = cpu_device, gpu_device

        self._batch_size = None
        self._autotune_gpu_mem = None
        self._autotune_plot = False
        self.stats_csv = None  # a path: per-step LMS statistics (IBM's LMSStatsLogger columns)
        self.autotune_result = None
        self._csv: StatsCsvLogger | None = None
        self._step_stats = StepStats(self._device)
        self._hook_step = 0

        _backend.enable()
        self._apply_serialization()
        self._apply_knobs()
        self._warn_about_knobs()
        log.info("[LMS] Large Model Support enabled (requested for %s)", self._device)

    # TFLMSv2's properties ------------------------------------------------------------------
    @property
    def batch_size(self):
        """Batch size for unknown batch dimensions, used only by the offline auto-tuner."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value):
        if value is not None and (type(value) is not int or value < 1):
            raise ValueError(f"batch_size must be an int >= 1, not {value!r}")
        self._batch_size = value

    @property
    def autotune_gpu_mem(self):
        """GPU memory in GiB that the auto-tuner simulates (TFLMSv2: a fictive GPU size)."""
        return self._autotune_gpu_mem

    @autotune_gpu_mem.setter
    def autotune_gpu_mem(self, value):
        if value is not None and (type(value) not in (int, float) or value <= 0):
            raise ValueError(f"autotune_gpu_mem must be GiB > 0, not {value!r}")
        self._autotune_gpu_mem = value

    @property
    def autotune_plot(self):
        """Whether auto-tuning writes the simulated memory-usage graph to .lms/ (PNG)."""
        return self._autotune_plot

    @autotune_plot.setter
    def autotune_plot(self, value):
        self._autotune_plot = bool(value)

    # construction helpers -------------------------------------------------------------------
    def _apply_serialization(self) -> None:
        if not (self._serialization or self._serialization_by_size):
            return
        # TF 2.14 has no per-level scheduling to reach from Python; one inter-op thread runs
        # independent operations one at a time everywhere (eager, tf.function and sessions).
        tf.config.threading.set_inter_op_parallelism_threads(1)
        what = (f"serialization={self._serialization!r}" if self._serialization
                else f"serialization_by_size={self._serialization_by_size!r}")
        _warn_once("serialization", f"{what} serializes every level here: TensorFlow runs one "
                   "operation at a time (inter-op parallelism 1), not only the levels named")

    def _apply_knobs(self) -> None:
        """The knobs the allocator's LMS has, through TF_LMS_CONF (read when the GPUs
        initialize): sync_mode as is, and swapin_ahead=0 (TFLMSv2: swap in right before the
        consumer) as no prefetch. The latest LMS object before the GPUs start wins."""
        k = self.knobs
        kept = _backend.apply_settings({
            "sync_mode": str(k.sync_mode),
            "swapin_ahead": "0" if k.swapin_ahead == 0 else None})
        for key in kept:
            _warn_once(f"conf-{key}", f"{key} from {_backend.CONF_VARIABLE} in the environment "
                       "is kept over the LMS argument")

    def _warn_about_knobs(self) -> None:
        k = self.knobs
        if k.swapin_groupby != AUTO:
            _warn_once("swapin_groupby", f"swapin_groupby={k.swapin_groupby} {_NOT_YET}")
        if k.swapout_threshold != AUTO:
            _warn_once("swapout_threshold", f"swapout_threshold={k.swapout_threshold} counts "
                       "operations in TFLMSv2, while this LMS pages out ahead of need above a "
                       "share of GPU memory (TF_LMS_CONF=swapout_threshold:SHARE, "
                       "docs/tensorflow-lms.md); accepted and ignored")
        if k.swapin_ahead not in (AUTO, 0):
            _warn_once("swapin_ahead", f"swapin_ahead={k.swapin_ahead} counts operations in "
                       "TFLMSv2, while this LMS budgets prefetch in bytes (TF_LMS_CONF="
                       "swapin_ahead:BYTES, docs/tensorflow-lms.md); accepted and ignored")
        if self._cpu_device != "/cpu:0":
            _warn_once("cpu_device", f"cpu_device={self._cpu_device!r} is ignored: paged-out "
                       "tensors go to TensorFlow's pinned GPU host memory")

    def _log_debug(self, level: int, message: str, *args) -> None:
        if self._debug and self._debug_level >= level:
            log.info("[LMS][%d] " + message, level, *args)

    # auto-tuning (offline simulator, helper modules) -----------------------------------------
    def _autotune(self, model_or_function) -> None:
        if not self.knobs.needs_tuning:
            return
        try:
            from . import autotune, graph, report
        except ImportError as error:
            _warn_once("autotune", f"auto-tuning is not available in this package ({error})")
            return
        try:
            model_graph = graph.model_graph(model_or_function, batch_size=self._batch_size)
        except Exception as error:  # tracing user models fails in many ways; never stop training
            _warn_once("autotune", "auto-tuning skipped: the model could not be traced "
                       f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})")
            return
        if self._autotune_gpu_mem is None:
            # No GPU size can be read without a GPU: report the model, tune nothing.
            for line in report.model_report(model_graph):
                log.info("%s", line)
            log.info("[LMS] set autotune_gpu_mem (GiB) to simulate a GPU and tune the knobs")
            return
        gpu_bytes = int(self._autotune_gpu_mem * _GIB)
        for line in report.model_report(model_graph, autotune.available_memory(gpu_bytes)):
            log.info("%s", line)
        result = autotune.autotune(model_graph, gpu_bytes)
        self.autotune_result = result
        for line in result.messages:
            log.info("%s", line)
        if result.knobs is not None:
            log.info("[LMS] recommended: swapout_threshold=%d swapin_ahead=%d swapin_groupby=%d "
                     "sync_mode=%d (not applied: the allocator has no such settings yet)",
                     result.knobs.swapout_threshold, result.knobs.swapin_ahead,
                     result.knobs.swapin_groupby, result.knobs.sync_mode)
        if self._autotune_plot:
            from . import plot
            name = getattr(model_or_function, "name", "model")
            path = Path(".lms") / f"autotune-{name}.png"
            path.parent.mkdir(exist_ok=True)
            plot.autotune_plot(model_graph, gpu_bytes, result.knobs, path)
            log.info("[LMS] memory-usage graph written to %s", path)

    def _require_enabled(self, where: str) -> None:
        if not _backend.is_enabled():
            raise RuntimeError(f"[LMS] {where}: Large Model Support is off; construct LMS(...) "
                               "before anything touches a GPU, or set TF_LMS_ENABLED=true")

    # Keras callback ----------------------------------------------------------------------------
    def set_model(self, model):
        super().set_model(model)
        self._autotune(model)

    def set_params(self, params):
        super().set_params(params)
        if params and params.get("batch_size") and self._batch_size is None:
            self._batch_size = params["batch_size"]

    def on_train_begin(self, logs=None):
        self._require_enabled("on_train_begin")
        self._epoch = 0
        if self.stats_csv:
            self._csv = StatsCsvLogger(self.stats_csv)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def _batch_begin(self):
        if self._csv is not None:
            self._step_stats.begin()

    def _batch_end(self, step_type, batch):
        if self._csv is not None:
            self._csv.write(step_type, getattr(self, "_epoch", 0), batch, self._step_stats.end())

    # Keras calls per-batch hooks only when some callback implements them, and they cost a sync
    # per batch; ours only do work with stats_csv, so they only ask for the calls then.
    def _implements_train_batch_hooks(self):
        return bool(self.stats_csv)

    def _implements_test_batch_hooks(self):
        return bool(self.stats_csv)

    def on_train_batch_begin(self, batch, logs=None):
        self._batch_begin()

    def on_train_batch_end(self, batch, logs=None):
        self._batch_end("t", batch)

    def on_test_batch_begin(self, batch, logs=None):
        self._batch_begin()

    def on_test_batch_end(self, batch, logs=None):
        self._batch_end("v", batch)

    def on_train_end(self, logs=None):
        if self._csv is not None:
            self._csv.close()
            self._csv = None

    # Estimator SessionRunHook ---------------------------------------------------------------------
    def begin(self):
        # The allocator may exist already: a hook can only check, never turn LMS on.
        self._require_enabled("begin")
        self._hook_step = 0
        if self.stats_csv:
            self._csv = StatsCsvLogger(self.stats_csv)

    def before_run(self, run_context):
        self._step_stats.begin()
        return None

    def after_run(self, run_context, run_values):
        deltas = self._step_stats.end()
        log.info("[LMS] step %d: %.3f s, %d allocs, %d single and %d full reclaims, "
                 "%.3f GiB reclaimed", self._hook_step, deltas["duration"], deltas["allocs"],
                 deltas["reclaimOnes"], deltas["reclaimAlls"], deltas["GiB reclaimed"])
        if self._csv is not None:
            self._csv.write("t", 0, self._hook_step, deltas)
        self._hook_step += 1

    def end(self, session):
        if self._csv is not None:
            self._csv.close()
            self._csv = None

    # tf.compat.v1 graphs ----------------------------------------------------------------------------
    def run(self, graph=None, keras=False):
        """TFLMSv2 edited GRAPH here. The allocator needs no edit: this returns the
        tf.compat.v1.ConfigProto to create the session with (LMS on; with ``serialization``,
        one inter-op thread and Grappler's SCHEDULING_HEURISTICS memory optimizer)."""
        config = _backend.session_config()
        if self._serialization or self._serialization_by_size:
            from tensorflow.core.protobuf import rewriter_config_pb2
            config.inter_op_parallelism_threads = 1
            config.graph_options.rewrite_options.memory_optimization = (
                rewriter_config_pb2.RewriterConfig.SCHEDULING_HEURISTICS)
        self._log_debug(1, "run(): session config %s", config)
        return config
