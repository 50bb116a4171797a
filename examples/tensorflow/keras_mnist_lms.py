#!/usr/bin/env python3
"""Train a convolutional MNIST classifier with Keras and TFLMSv2's ``LMS`` callback (auto-tuned:
``LMS()``), the first example most TFLMSv2 users ran.

Needs TensorFlow built from lmsforge's LMS series for ``--lms``; on a stock TensorFlow, ``--lms``
stops with one line saying an LMS build is needed, and without it the script trains on whatever
device TensorFlow has. MNIST comes from ``--data mnist.npz`` (Keras' file), else from Keras'
download; ``--synthetic`` trains on random images of MNIST's shape instead (no download, for
machines without network):

    python3 examples/tensorflow/keras_mnist_lms.py --lms --epochs 1 --stats-csv lms-stats.csv
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0,
                        help="train on the first N images only (0: all)")
    parser.add_argument("--lms", action="store_true", help="turn Large Model Support on")
    parser.add_argument("--stats-csv", help="with --lms: per-step LMS statistics to this CSV")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", help="Keras' mnist.npz (x_train, y_train, x_test, y_test)")
    source.add_argument("--synthetic", action="store_true",
                        help="random 28x28 images and labels instead of MNIST")
    args = parser.parse_args(argv)
    for name in ("batch_size", "epochs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.limit < 0:
        parser.error("--limit must be >= 0")
    return args


def load_mnist(args, np, tf):
    """(x_train, y_train, x_test, y_test), images scaled to [0, 1] with a channel axis."""
    if args.synthetic:
        rng = np.random.default_rng(0)
        count = args.limit or 2048
        x_train = rng.random((count, 28, 28), dtype=np.float32)
        x_test = rng.random((count // 4 or 1, 28, 28), dtype=np.float32)
        data = (x_train, rng.integers(0, 10, count), x_test, rng.integers(0, 10, len(x_test)))
    elif args.data:
        with np.load(args.data) as npz:
            data = tuple(npz[key] for key in ("x_train", "y_train", "x_test", "y_test"))
    else:
        (x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
        data = (x_train, y_train, x_test, y_test)
    x_train, y_train, x_test, y_test = data
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    scale = 1.0 if x_train.dtype == np.float32 else 255.0
    return (x_train[..., None].astype(np.float32) / scale, y_train,
            x_test[..., None].astype(np.float32) / scale, y_test)


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

    try:
        x_train, y_train, x_test, y_test = load_mnist(args, np, tf)
    except Exception as error:  # Keras' download raises a bare Exception when offline
        print(f"error: could not load MNIST ({error}); pass --data mnist.npz, or --synthetic",
              file=sys.stderr)
        return 2
    model = tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Conv2D(64, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=callbacks, verbose=0)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=args.batch_size, verbose=0)
    what = "synthetic images" if args.synthetic else "MNIST"
    print(f"trained {args.epochs} epoch(s) on {len(x_train)} {what}, batch {args.batch_size}, "
          f"LMS {'on' if args.lms else 'off'}: test loss {loss:.4f}, accuracy {accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
