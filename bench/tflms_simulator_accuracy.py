"""How well the offline simulator's peak WITHOUT LMS (tensorflow_large_model_support.simulator)
predicts a real step: the same traced training step is run on the CPU with TensorFlow's BFC
allocator (TF_CPU_ALLOCATOR_USE_BFC=true), whose peak ``get_memory_info("CPU:0")`` reports.

Run with the tflms test venv's Python (tests/tflms_venv.py) and the package on PYTHONPATH:

    PYTHONPATH=packages/tensorflow-large-model-support <venv>/bin/python \\
        bench/tflms_simulator_accuracy.py [resnet50|unet3d|transformer ...]

One line per model: simulated peak, measured peak, their ratio. The measured peak includes what
the simulator leaves out (kernel scratch, oneDNN's reorders, the executor running independent
operations at once) and is lowered by what it does not model (TensorFlow reusing an input's buffer
for an output); docs/tflms-planning.md discusses the figures.
"""

from __future__ import annotations

import os
import sys
import time

# All must be set before TensorFlow starts: the CPU allocator and the thread pools are made once.
os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# The executor's order depends on its thread count, and TensorFlow sizes its pools by the CPUs it
# may use. With one inter-op thread it runs the step in an order that keeps more tensors alive:
# the transformer block's peak rises from about 235 to 284-295 MiB (one CPU, or these set to 1).
# Fixed pools make the figure the same on every machine we can see here, but not on all: CI's
# landing machine measured 287 MiB with them (docs/tflms-planning.md). Set these to measure
# another configuration.
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "2")
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "2")


def resnet50():
    import tensorflow as tf
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(512, 512, 3))
    model.compile(optimizer="sgd", loss="categorical_crossentropy")
    return model, 1


def unet3d():
    import tensorflow as tf
    layers = tf.keras.layers

    def block(x, filters):
        x = layers.Conv3D(filters, 3, padding="same", activation="relu")(x)
        return layers.Conv3D(filters, 3, padding="same", activation="relu")(x)

    inputs = layers.Input((64, 64, 64, 1))
    down1 = block(inputs, 8)
    down2 = block(layers.MaxPool3D(2)(down1), 16)
    bottom = block(layers.MaxPool3D(2)(down2), 32)
    up2 = block(layers.Concatenate()([layers.UpSampling3D(2)(bottom), down2]), 16)
    up1 = block(layers.Concatenate()([layers.UpSampling3D(2)(up2), down1]), 8)
    outputs = layers.Conv3D(1, 1, activation="sigmoid")(up1)
    model = tf.keras.Model(inputs, outputs, name="unet3d")
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model, 1


def transformer():
    import tensorflow as tf
    layers = tf.keras.layers
    sequence, width, heads = 512, 256, 8
    inputs = layers.Input((sequence, width))
    attended = layers.MultiHeadAttention(heads, width // heads)(inputs, inputs)
    x = layers.LayerNormalization()(inputs + attended)
    hidden = layers.Dense(4 * width, activation="gelu")(x)
    x = layers.LayerNormalization()(x + layers.Dense(width)(hidden))
    outputs = layers.Dense(width)(x)
    model = tf.keras.Model(inputs, outputs, name="transformer_block")
    model.compile(optimizer="adam", loss="mse")
    return model, 8


STEPS = 3  # measured steps; the median peak is the figure
MODELS = {"resnet50": resnet50, "unet3d": unet3d, "transformer": transformer}


def measure(name: str) -> tuple[int, int, float]:
    """(simulated peak, measured peak, seconds per real step) for model NAME."""
    import numpy as np
    import tensorflow as tf

    from tensorflow_large_model_support import graph, simulator

    # What earlier models of this process still hold is not this step's: measured from here.
    baseline = tf.config.experimental.get_memory_info("CPU:0")["current"]
    model, batch = MODELS[name]()
    function = graph.keras_training_step(model, batch)
    predicted = simulator.simulate(graph.graph_of(function.graph, batch), 2**40).peak_bytes_without_lms
    rng = np.random.default_rng(0)
    feeds = tf.nest.map_structure(lambda spec: tf.constant(rng.random(spec.shape, dtype=np.float32)),
                                  function.structured_input_signature[0])
    function(*feeds)  # the first run builds kernels and oneDNN primitives: not measured
    peaks = []
    start = time.perf_counter()
    for _ in range(STEPS):
        # The executor runs independent operations on several threads: peaks vary a little.
        tf.config.experimental.reset_memory_stats("CPU:0")
        function(*feeds)
        peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"] - baseline)
    seconds = (time.perf_counter() - start) / STEPS
    measured = sorted(peaks)[len(peaks) // 2]
    print(f"{name}: measured step peaks {', '.join(f'{p / 2**20:.1f}' for p in peaks)} MiB",
          file=sys.stderr)
    return predicted, measured, seconds


def main(argv: list[str]) -> int:
    names = argv or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown model {unknown[0]!r}: choose from {', '.join(MODELS)}", file=sys.stderr)
        return 2
    if len(names) > 1:
        # One process a model: what an earlier model left in the allocator would blur the peak.
        import subprocess
        return max(subprocess.run([sys.executable, __file__, name]).returncode for name in names)
    predicted, measured, seconds = measure(names[0])
    print(f"{names[0]}: simulated peak {predicted / 2**20:.1f} MiB, measured (CPU BFC peak, "
          f"median of {STEPS} steps) {measured / 2**20:.1f} MiB, simulated/measured "
          f"{predicted / measured:.3f}, real step {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
