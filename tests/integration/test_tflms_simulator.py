"""The offline simulator of tensorflow_large_model_support (graph, simulator, autotune, report, plot)
on the stock TensorFlow 2.14.1 CPU wheel. One subprocess runs every check (TensorFlow takes seconds
to import) and prints its findings as JSON; the tests below read them.

The CPU agreement check runs the transformer block's training step for real with TensorFlow's BFC
allocator on the CPU and compares its peak with the simulator's; bench/tflms_simulator_accuracy.py
does the same for ResNet-50 and a 3D U-Net (docs/tflms-planning.md has the figures)."""

from __future__ import annotations

import json
import struct
import textwrap
from pathlib import Path

import pytest

from conftest import real_test_cache
from tflms_venv import ROOT, run_tflms, tflms_venv

SCRIPT = textwrap.dedent('''
    import json, os, sys
    sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
    import tflms_simulator_accuracy as accuracy  # sets TF_CPU_ALLOCATOR_USE_BFC before TensorFlow
    import tensorflow as tf
    from tensorflow_large_model_support import autotune, graph, plot, report, simulator
    from tensorflow_large_model_support.knobs import Knobs

    out = {}
    N = 1000  # float32 elements: 4000 bytes a tensor

    @tf.function
    def chain(x):
        a = x * 2.0
        b = a * 3.0
        c = b * 3.0
        e = c * 3.0
        return tf.reduce_sum(e) + tf.reduce_sum(a)

    tiny = graph.model_graph(chain.get_concrete_function(tf.TensorSpec([N], tf.float32)))
    out["tiny_order"] = [op.type for op in tiny.ops]
    out["tiny_peak"] = simulator.simulate(tiny, 2**30).peak_bytes_without_lms
    run = simulator.simulate(tiny, 10000)
    out["tiny_lms"] = dict(fits=run.fits, fits_without=run.fits_without_lms, peak=run.peak_bytes,
                           out=run.bytes_paged_out, into=run.bytes_paged_in)
    run = simulator.simulate(tiny, 7000)
    out["tiny_too_small"] = dict(fits=run.fits, op=run.failing_op, reason=run.reason)

    @tf.function
    def renamed(x):
        a = x * 2.0
        r = tf.reshape(a, [10, 100])
        b = tf.identity(r) * 3.0
        return tf.reduce_sum(b) + tf.reduce_sum(r)

    aliased = graph.model_graph(renamed.get_concrete_function(tf.TensorSpec([N], tf.float32)))
    out["alias_peak"] = simulator.simulate(aliased, 2**30).peak_bytes_without_lms

    @tf.function
    def unknown_batch(x):
        return tf.reduce_sum(x * 2.0)
    function = unknown_batch.get_concrete_function(tf.TensorSpec([None, 10], tf.float32))
    try:
        graph.model_graph(function)
        out["unknown_error"] = None
    except ValueError as error:
        out["unknown_error"] = str(error)
    out["batch_peak"] = simulator.simulate(graph.model_graph(function, batch_size=100),
                                           2**30).peak_bytes_without_lms

    inputs = tf.keras.layers.Input((64, 64, 3))
    x = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    outputs = tf.keras.layers.Dense(4)(tf.keras.layers.GlobalAveragePooling2D()(x))
    model = tf.keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mse")
    try:
        graph.model_graph(model)
        out["keras_unknown_error"] = None
    except ValueError as error:
        out["keras_unknown_error"] = str(error)
    # Labels of a sparse loss are class indices, (batch,) integers, not shaped like the output.
    def classifier(loss):
        inputs = tf.keras.layers.Input((32,))
        logits = tf.keras.layers.Dense(10)(tf.keras.layers.Dense(64, activation="relu")(inputs))
        classifier = tf.keras.Model(inputs, logits)
        classifier.compile(optimizer="adam", loss=loss)
        return classifier
    out["sparse_ops"] = {}
    for name, loss in [("name", "sparse_categorical_crossentropy"),
                       ("object", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)),
                       ("dense", "categorical_crossentropy")]:
        traced = graph.model_graph(classifier(loss), batch_size=16)
        out["sparse_ops"][name] = [op.type for op in traced.ops]
    odd = classifier(lambda y, p: tf.reduce_sum(tf.gather(p, tf.cast(y[:, :, 0], tf.int32),
                                                          batch_dims=1)))
    try:
        graph.model_graph(odd, batch_size=4)
        out["untraceable_error"] = None
    except ValueError as error:
        out["untraceable_error"] = str(error)
    keras = graph.model_graph(model, batch_size=8)
    peak = simulator.simulate(keras, 2**40).peak_bytes_without_lms
    out["keras_peak"] = peak
    roomy = autotune.autotune(keras, 2 * peak)
    out["roomy"] = dict(knobs=roomy.knobs, messages=roomy.messages)
    tight_memory = int(peak * 0.75 / 0.9)
    tight = autotune.autotune(keras, tight_memory)
    out["tight_messages"] = tight.messages
    if tight.knobs is not None:
        check = simulator.simulate(keras, int(tight_memory * 0.9), tight.knobs)
        out["tight"] = dict(knobs=vars(tight.knobs), fits=check.fits, peak=check.peak_bytes,
                            on_demand=check.bytes_paged_out_on_demand,
                            available=int(tight_memory * 0.9), result_fits=tight.with_lms.fits)
    os.environ["TF_LMS_SIMULATOR_MEM_RATIO"] = "1.5"
    try:
        autotune.autotune(keras, tight_memory)
        out["ratio_error"] = None
    except ValueError as error:
        out["ratio_error"] = str(error)
    del os.environ["TF_LMS_SIMULATOR_MEM_RATIO"]
    out["report"] = report.model_report(keras, tight_memory)
    out["plot"] = str(plot.autotune_plot(keras, tight_memory, tight.knobs, "memory.png"))

    predicted, measured, seconds = accuracy.measure("transformer")
    out["agreement"] = dict(predicted=predicted, measured=measured, seconds=seconds)
    print("RESULT" + json.dumps(out))
''')


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> dict:
    venv = tflms_venv(real_test_cache())
    work = tmp_path_factory.mktemp("tflms-sim")
    script = SCRIPT.replace('os.path.join(os.getcwd(), "bench")', repr(str(ROOT / "bench")))
    done = run_tflms(venv, script, cwd=work)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT"):])
    result["work"] = str(work)
    return result


def test_renaming_operations_share_their_inputs_buffer(findings: dict) -> None:
    # a = 2x (x, 4000 B, then dead); r = reshape(a) and identity(r) are a's buffer under other
    # names, kept alive by the last sum; b = 3 identity(r): a and b live, 8000 B, plus a few
    # bytes of constants (the shape, the reduce axes). Counted apart they would be 12000 B or more.
    assert 8000 <= findings["alias_peak"] <= 8040


def test_a_tiny_graph_peaks_where_counted_by_hand(findings: dict) -> None:
    # x (4000 B) feeds a = 2x; x is then dead. b = 3a, c = 3b, e = 3c: when e is computed,
    # a (still needed by the last sum), c and e are live: 12000 B, plus two 4-byte constants
    # (3.0 for e, and the reduce axes already made in order) at most.
    assert findings["tiny_order"][:2] == ["Placeholder", "Const"]
    assert 12000 <= findings["tiny_peak"] <= 12012


def test_lms_pages_out_the_inactive_tensor_to_fit(findings: dict) -> None:
    # In 10000 B the step does not fit as it is; a (unused between b and the last sum) is paged
    # out and back in: 4000 B each way, and the peak stays within the memory.
    tiny = findings["tiny_lms"]
    assert tiny["fits"] and not tiny["fits_without"]
    assert tiny["peak"] <= 10000
    assert tiny["out"] == 4000 and tiny["into"] == 4000


def test_does_not_fit_names_the_operation(findings: dict) -> None:
    # 7000 B cannot hold even one multiplication's input and output (8000 B) with LMS.
    too_small = findings["tiny_too_small"]
    assert not too_small["fits"]
    assert too_small["op"] == "mul"
    assert "mul (Mul)" in too_small["reason"] and "does not fit even with LMS" in too_small["reason"]


def test_an_unknown_batch_needs_batch_size(findings: dict) -> None:
    for message in (findings["unknown_error"], findings["keras_unknown_error"]):
        assert message and "\n" not in message and "batch_size" in message
    # With batch_size=100 the [None, 10] input is 4000 B and x * 2.0 another 4000 B.
    assert 8000 <= findings["batch_peak"] <= 8012


def test_a_sparse_loss_traces_with_class_index_labels(findings: dict) -> None:
    ops = findings["sparse_ops"]
    # Both spellings of the sparse loss trace its own kernel; the dense loss traces another.
    assert all("SparseSoftmaxCrossEntropyWithLogits" in ops[name] for name in ("name", "object"))
    assert "SparseSoftmaxCrossEntropyWithLogits" not in ops["dense"]


def test_an_untraceable_step_is_one_line(findings: dict) -> None:
    error = findings["untraceable_error"]
    assert error is not None and "\n" not in error
    assert error.startswith("the training step of this Keras model could not be traced (")
    assert "Index out of range" in error


def test_lms_is_not_necessary_when_the_step_fits(findings: dict) -> None:
    assert findings["roomy"]["knobs"] is None
    assert findings["roomy"]["messages"][0] == "[LMS] LMS is not necessary. Turned LMS off."


def test_autotuned_knobs_fit_in_their_own_simulation(findings: dict) -> None:
    assert "tight" in findings, findings["tight_messages"]
    tight = findings["tight"]
    assert tight["fits"] and tight["result_fits"] and tight["on_demand"] == 0
    assert tight["peak"] <= tight["available"] < findings["keras_peak"]
    assert tight["knobs"]["swapout_threshold"] >= 1 and tight["knobs"]["swapin_ahead"] >= 1
    assert any("swapout_threshold =" in m for m in findings["tight_messages"])


def test_a_bad_memory_ratio_is_one_line(findings: dict) -> None:
    message = findings["ratio_error"]
    assert message and "\n" not in message and "TF_LMS_SIMULATOR_MEM_RATIO" in message


def test_the_model_report_has_tflmsv2_lines(findings: dict) -> None:
    lines = findings["report"]
    assert all(line.startswith("[LMS] ") for line in lines)
    text = "\n".join(lines)
    for words in ("vertices and", "edges", "MiB of learning parameters",
                  "The largest GPU operation is", "topological sort has", "page-outs"):
        assert words in text, text


def test_the_plot_is_a_png(findings: dict) -> None:
    data = (Path(findings["work"]) / findings["plot"]).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 100


def test_the_peak_without_lms_agrees_with_a_real_cpu_step(findings: dict) -> None:
    # The transformer block's step run for real with the CPU BFC allocator. The real peak is not
    # one figure: how TensorFlow's runtime runs the step moves it from 231 to 295 MiB against
    # 232 simulated (0.79-1.00 measured across machines, thread pools and Grappler settings:
    # docs/tflms-planning.md). The bar takes that spread, 25% under to 15% over.
    # Tensors sized wrong (halved: 0.51) miss it; the buffers shared by renaming operations are
    # checked exactly above, as the spread hides them here (counted apart: 296 MiB, 1.26 here).
    agreement = findings["agreement"]
    ratio = agreement["predicted"] / agreement["measured"]
    assert 0.75 <= ratio <= 1.15, agreement
