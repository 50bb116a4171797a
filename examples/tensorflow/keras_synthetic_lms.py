#!/usr/bin/env python3
"""Train a small convolutional network on synthetic high-resolution images with Keras, with
TFLMSv2's ``LMS`` callback when ``--lms`` is given.

Needs TensorFlow built from lmsforge's LMS series for ``--lms`` (and a GPU for it to matter); on
a stock TensorFlow, ``--lms`` stops with one line saying an LMS build is needed, and without it
the script trains on whatever device TensorFlow has:

    python3 examples/tensorflow/keras_synthetic_lms.py --image-size 2048 --batch-size 4 --lms \\
        --stats-csv lms-stats.csv
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=512, help="height and width (pixels)")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="training steps per epoch")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lms", action="store_true", help="turn Large Model Support on")
    parser.add_argument("--stats-csv", help="with --lms: per-step LMS statistics to this CSV")
    args = parser.parse_args(argv)
    for name in ("image_size", "batch_size", "steps", "epochs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    callbacks = []
    if args.lms:
        # Before anything touches a GPU: LMS is fixed when a GPU's allocator is created.
        from tensorflow_large_model_support import LMS, LmsUnavailableError
        try:
            lms = LMS()
        except (LmsUnavailableError, RuntimeError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        lms.batch_size = args.batch_size
        lms.stats_csv = args.stats_csv
        callbacks.append(lms)

    import numpy as np
    import tensorflow as tf

    size, batch = args.image_size, args.batch_size
    rng = np.random.default_rng(0)
    images = rng.random((batch * args.steps, size, size, 3), dtype=np.float32)
    labels = rng.integers(0, 10, batch * args.steps)
    layers = [tf.keras.Input((size, size, 3))]
    for filters in (16, 32, 64):
        layers += [tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
                   tf.keras.layers.MaxPooling2D()]
    layers += [tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(10)]
    model = tf.keras.Sequential(layers)
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(images, labels, batch_size=batch, epochs=args.epochs,
                        callbacks=callbacks, verbose=0)
    print(f"trained {args.epochs} epoch(s) of {args.steps} steps at {size}x{size}, "
          f"batch {batch}, LMS {'on' if args.lms else 'off'}: loss {history.history['loss'][-1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
