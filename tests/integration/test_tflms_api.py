"""TFLMSv2's user surface (issue 29): ``from tensorflow_large_model_support import LMS`` on the
stock tensorflow==2.14.1 CPU wheel.

Two interpreter runs keep the module cheap (TensorFlow's import is most of each): the issue's
snippet unchanged, which must stop at the one-line "needs an LMS build" error; and one script
where a recorder stands in for the series' three ``tf.config.experimental`` functions (patch
0100: a late ``set_lms_enabled`` raises RuntimeError, ``get_lms_stats`` starts the GPUs) and
every other check runs: knobs and their warnings, validation, a real Keras ``fit`` logging
statistics to CSV, a real Estimator training with the hook, ``run()`` and the stats wrappers."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

import pytest

from tflms_venv import run_tflms, tflms_venv

ISSUE_SNIPPET = """\
from tensorflow_large_model_support import LMS
lms_hook = LMS(swapout_threshold=1, swapin_ahead=0, swapin_groupby=0, sync_mode=0)  # or LMS() to auto-tune
lms_hook.batch_size = FLAGS.train_batch_size
estimator.train(input_fn=train_input_fn, max_steps=num_train_steps, hooks=[lms_hook])
"""

NO_LMS_LINE = ("tensorflow_large_model_support.LmsUnavailableError: this TensorFlow has no Large "
               "Model Support: install an lmsforge LMS build (conda install -c <channel> "
               "tensorflow), see docs/tensorflow-lms.md")

STAND_IN_SCRIPT = textwrap.dedent(r'''
    import json, logging, os, sys, warnings
    import numpy as np
    import tensorflow as tf

    class SeriesStandIn:
        """Behaves like patch 0100's three functions on a machine with one GPU."""
        def __init__(self):
            self.enabled, self.gpus_initialized, self.sets, self.reads = False, False, [], 0
        def set_lms_enabled(self, enable):
            self.sets.append(bool(enable))
            if bool(enable) == self.enabled:
                return
            if self.gpus_initialized:
                raise RuntimeError("Large Model Support cannot be changed after the GPUs were "
                                   "initialized; call tf.config.experimental.set_lms_enabled() "
                                   "at the start of the program, or set TF_LMS_ENABLED=true")
            self.enabled = bool(enable)
        def get_lms_enabled(self):
            return self.enabled
        def get_lms_stats(self, device):
            self.gpus_initialized = True
            if not self.enabled:
                raise ValueError(f"Large Model Support is not enabled on device '{device}'")
            self.reads += 1
            n = self.reads  # counters grow by 3 allocs, 1 single reclaim, 1 MiB per read
            return {"num_allocs": 3 * n, "bytes_active": 0, "peak_bytes_active": 0,
                    "bytes_inactive": 0, "bytes_reclaimed": n << 20,
                    "current_bytes_reclaimed": 0, "peak_bytes_reclaimed": 0,
                    "num_single_reclaims": n, "num_full_reclaims": 0, "num_pageins": n,
                    "bytes_paged_in": n << 20}

    series = SeriesStandIn()
    for name in ("set_lms_enabled", "get_lms_enabled", "get_lms_stats"):
        setattr(tf.config.experimental, name, getattr(series, name))

    logged = []
    class Keep(logging.Handler):
        def emit(self, record):
            logged.append(record.getMessage())
    lms_log = logging.getLogger("tensorflow_large_model_support")
    lms_log.addHandler(Keep()); lms_log.setLevel(logging.INFO)

    from tensorflow_large_model_support import LMS, LMSWarning, stats
    out = {}

    def one_line_error(**kwargs):
        before = list(series.sets)
        try:
            LMS(**kwargs)
        except Exception as error:
            return [type(error).__name__, str(error), series.sets == before]
        return None

    out["invalid"] = {name: one_line_error(**kwargs) for name, kwargs in {
        "threshold0": {"swapout_threshold": 0}, "sync4": {"sync_mode": 4},
        "bool_ahead": {"swapin_ahead": True}, "debug_level3": {"debug_level": 3},
        "serialization_str": {"serialization": "1:3"}, "gpu_cpu": {"gpu_device": "/cpu:0"}}.items()}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lms = LMS(swapout_threshold=1, swapin_ahead=0, swapin_groupby=0, sync_mode=1,
                  serialization=[1, "3:5"])
        LMS(swapout_threshold=2, swapin_ahead=3, swapin_groupby=4, sync_mode=3,
            serialization=[2])
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, LMSWarning)]
    out["tf_lms_conf"] = os.environ.get("TF_LMS_CONF")
    out["enabled_after_init"] = series.enabled
    out["inter_op_threads"] = tf.config.threading.get_inter_op_parallelism_threads()

    tmp = sys.argv[1]
    lms.batch_size = 8
    lms.stats_csv = f"{tmp}/keras.csv"
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3),
                                 tf.keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(x, y, batch_size=8, epochs=2, validation_data=(x[:16], y[:16]), callbacks=[lms],
              verbose=0)
    out["keras_is_callback"] = isinstance(lms, tf.keras.callbacks.Callback)

    auto = LMS()
    auto.autotune_gpu_mem = 0.001
    auto.batch_size = 8
    auto.autotune_plot = True
    logged.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=8, epochs=1, callbacks=[auto], verbose=0)
    out["autotune_warnings"] = [str(w.message) for w in caught if issubclass(w.category, LMSWarning)]
    out["autotune_log"] = list(logged)
    out["autotune_has_knobs"] = auto.autotune_result is not None

    def linear_input():
        return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(8).repeat()
    hook = LMS(swapout_threshold=1, swapin_ahead=0, swapin_groupby=0, sync_mode=0)
    hook.stats_csv = f"{tmp}/estimator.csv"
    logged.clear()
    estimator = tf.estimator.LinearRegressor([tf.feature_column.numeric_column("x", shape=(4,))],
                                             model_dir=f"{tmp}/estimator")
    estimator.train(input_fn=linear_input, max_steps=3, hooks=[hook])
    out["estimator_is_hook"] = isinstance(hook, tf.estimator.SessionRunHook)
    out["estimator_log"] = [line for line in logged if line.startswith("[LMS] step")]

    try:
        hook.run()
    except Exception as error:
        out["run"] = [type(error).__name__, str(error)]

    out["wrappers"] = [stats.get_num_allocs(0), stats.get_num_single_reclaims(0)]
    try:
        stats.get_bytes_limit(0)
    except AttributeError as error:
        out["not_carried"] = str(error)

    series.enabled = False  # LMS off (say the program never asked) once the GPUs exist
    try:
        model.fit(x, y, batch_size=8, epochs=1, callbacks=[lms], verbose=0)
    except RuntimeError as error:
        out["fit_with_lms_off"] = str(error)
    try:
        hook.begin()
    except RuntimeError as error:
        out["hook_with_lms_off"] = str(error)
    out["too_late"] = one_line_error()
    print("RESULT " + json.dumps(out))
''')


@pytest.fixture(scope="module")
def venv(real_cache_dir: Path) -> Path:
    return tflms_venv(real_cache_dir)


def test_issue_snippet_stops_at_one_line_on_stock_tensorflow(venv: Path, tmp_path: Path) -> None:
    ran = run_tflms(venv, ISSUE_SNIPPET, cwd=tmp_path)
    assert ran.returncode == 1, ran.stderr[-2000:]
    assert ran.stderr.strip().splitlines()[-1] == NO_LMS_LINE, ran.stderr[-2000:]


@pytest.fixture(scope="module")
def stand_in(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    tmp = tmp_path_factory.mktemp("tflms-stand-in")
    ran = run_tflms(venv, STAND_IN_SCRIPT.replace("sys.argv[1]", repr(str(tmp))), cwd=tmp)
    assert ran.returncode == 0, ran.stderr[-4000:]
    line = next(line for line in ran.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), tmp


def test_validation_errors_are_one_line_and_change_nothing(stand_in) -> None:
    invalid = stand_in[0]["invalid"]
    assert invalid["threshold0"][:2] == ["ValueError", "swapout_threshold must be -1 (auto) or >= 1, not 0"]
    assert invalid["sync4"][0] == "ValueError" and invalid["sync4"][1].startswith("sync_mode must be 0, 1, 2 or 3")
    assert invalid["bool_ahead"][:2] == ["TypeError", "swapin_ahead must be an int, not bool (True)"]
    assert invalid["debug_level3"][:2] == ["ValueError", "debug_level must be 1 or 2, not 3"]
    assert invalid["serialization_str"][0] == "TypeError"
    assert invalid["gpu_cpu"][0] == "ValueError"
    for name, (kind, message, unchanged) in invalid.items():
        assert "\n" not in message, name
        assert unchanged, f"{name}: LMS was switched before the arguments were checked"


def test_knobs_enable_lms_and_warn_once_each(stand_in) -> None:
    out = stand_in[0]
    assert out["enabled_after_init"] is True
    warned = out["warnings"]
    # Two LMS objects with every knob set: one warning per knob, each saying what it does here.
    assert sorted(w.split("=")[0] for w in warned) == [
        "[LMS] serialization", "[LMS] swapin_ahead", "[LMS] swapin_groupby",
        "[LMS] swapout_threshold"], warned
    assert all("accepted and ignored" in w for w in warned if "serialization" not in w)
    assert any("counts operations in TFLMSv2" in w for w in warned)
    # sync_mode reaches the allocator (TF_LMS_CONF, read when the GPUs start); the later
    # object's swapin_ahead=3 (operations, no byte budget) put the first's 0 back to auto.
    assert out["tf_lms_conf"] == "sync_mode:3"
    assert any("inter-op parallelism 1" in w for w in warned)
    assert out["inter_op_threads"] == 1


def test_keras_fit_logs_lms_statistics_to_csv(stand_in) -> None:
    out, tmp = stand_in
    assert out["keras_is_callback"]
    rows = list(csv.reader((tmp / "keras.csv").open()))
    assert rows[0] == ["step type", "epoch", "step", "duration", "allocs", "reclaimOnes",
                       "reclaimAlls", "GiB reclaimed"]
    body = rows[1:]
    # 2 epochs x 4 training batches, and 2 validation batches after each epoch.
    assert [(r[0], r[1], r[2]) for r in body if r[0] == "t"] == [
        ("t", str(e), str(b)) for e in (0, 1) for b in range(4)]
    assert sum(r[0] == "v" for r in body) == 4
    # The stand-in's counters move by one read per snapshot: each step's delta is one read.
    assert {(r[4], r[5], r[6], r[7]) for r in body} == {("3", "1", "0", f"{1 / 1024:.6f}")}


def test_autotune_path_reports_or_says_why_not(stand_in) -> None:
    out = stand_in[0]
    unavailable = [w for w in out["autotune_warnings"] if "auto-tuning is not available" in w]
    if unavailable:
        pytest.skip(f"the offline auto-tuner (graph/autotune/report, helper h48) is absent: {unavailable[0]}")
    assert not [w for w in out["autotune_warnings"] if "skipped" in w], out["autotune_warnings"]
    log = out["autotune_log"]
    assert any(line.startswith("[LMS] The graph has") for line in log), log
    assert out["autotune_has_knobs"], log
    assert (stand_in[1] / ".lms" / "autotune-sequential.png").stat().st_size > 0, log


def test_estimator_training_with_the_hook_logs_each_step(stand_in) -> None:
    out, tmp = stand_in
    assert out["estimator_is_hook"]
    assert len(out["estimator_log"]) == 3, out["estimator_log"]
    rows = list(csv.reader((tmp / "estimator.csv").open()))
    assert [r[:3] for r in rows[1:]] == [["t", "0", "0"], ["t", "0", "1"], ["t", "0", "2"]]
    assert {r[4] for r in rows[1:]} == {"3"}


def test_lms_off_or_too_late_fails_with_one_line(stand_in) -> None:
    out = stand_in[0]
    assert out["fit_with_lms_off"].startswith("[LMS] on_train_begin: Large Model Support is off")
    assert out["hook_with_lms_off"].startswith("[LMS] begin: Large Model Support is off")
    kind, message, _ = out["too_late"]
    assert kind == "RuntimeError" and message.startswith(
        "Large Model Support cannot be changed after the GPUs were initialized")


def test_run_and_stats_wrappers(stand_in) -> None:
    out = stand_in[0]
    # The stand-in covers the three functions, not the proto: run() says the build is incomplete.
    assert out["run"][0] == "LmsUnavailableError" and "ConfigProto has no lms_enabled field" in out["run"][1]
    allocs, single = out["wrappers"]
    # Two wrapper calls, two reads of the stand-in: the second read is one later.
    assert single > 1 and allocs == 3 * (single - 1)
    assert out["not_carried"] == ("get_bytes_limit has no equivalent in lmsforge's LMS: TensorFlow "
                                  "2.14 exposes only get_memory_info's 'current' and 'peak'")


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tensorflow"


def _run_example(venv: Path, name: str, *args: str, cwd: Path):
    script = (f"import runpy, sys; sys.argv = [{name!r}, *{list(args)!r}]; "
              f"runpy.run_path({str(EXAMPLES / name)!r}, run_name='__main__')")
    return run_tflms(venv, script, cwd=cwd)


@pytest.mark.parametrize("name", ["keras_synthetic_lms.py", "estimator_lms.py",
                                  "session_lms.py", "keras_mnist_lms.py"])
def test_examples_stop_at_the_lms_switch_on_stock_tensorflow(venv: Path, tmp_path: Path,
                                                             name: str) -> None:
    args = ["--lms"] if name.startswith("keras") else []
    ran = _run_example(venv, name, *args, cwd=tmp_path)
    assert ran.returncode == 1, ran.stderr[-2000:]
    # TensorFlow's own C++ start-up lines may come first (cuDNN/cuFFT factory notes).
    assert ran.stderr.strip().splitlines()[-1] == "error: " + NO_LMS_LINE.split(": ", 1)[1], \
        ran.stderr[-2000:]
    assert "Traceback" not in ran.stderr


def test_keras_example_trains_without_lms_on_stock_tensorflow(venv: Path, tmp_path: Path) -> None:
    ran = _run_example(venv, "keras_synthetic_lms.py", "--image-size", "32", "--steps", "2",
                       cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "at 32x32, batch 2, LMS off: loss" in ran.stdout


def test_session_example_trains_without_lms_on_stock_tensorflow(venv: Path,
                                                                tmp_path: Path) -> None:
    ran = _run_example(venv, "session_lms.py", "--no-lms", "--image-size", "32", "--steps", "2",
                       cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "trained 2 steps at 32x32, batch 4, LMS off: loss" in ran.stdout


def test_mnist_example_trains_on_synthetic_images_and_refuses_a_missing_file(
        venv: Path, tmp_path: Path) -> None:
    ran = _run_example(venv, "keras_mnist_lms.py", "--synthetic", "--limit", "64",
                       "--batch-size", "32", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "trained 1 epoch(s) on 64 synthetic images, batch 32, LMS off: test loss" in ran.stdout
    missing = tmp_path / "missing.npz"
    ran = _run_example(venv, "keras_mnist_lms.py", "--data", str(missing), cwd=tmp_path)
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines()[-1].startswith("error: could not load MNIST (")
    assert ran.stderr.strip().endswith("pass --data mnist.npz, or --synthetic")
