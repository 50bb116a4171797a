#!/usr/bin/env python3
"""Train a small convolutional network with tf.compat.v1 graphs and a Session, with TFLMSv2's
``LMS`` giving the session its configuration, as TFLMSv2's session-based users did
(``lms.run(graph)`` before ``tf.Session``).

Needs TensorFlow built from lmsforge's LMS series (and a GPU for LMS to matter); on a stock
TensorFlow it stops with one line saying an LMS build is needed (``--no-lms`` trains without it):

    python3 examples/tensorflow/session_lms.py --image-size 1024 --batch-size 8 --steps 50
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=256, help="height and width (pixels)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-lms", action="store_true", help="train without Large Model Support")
    parser.add_argument("--serialization", action="store_true",
                        help="TFLMSv2's serialization: one inter-op thread (docs/tensorflow-lms.md)")
    args = parser.parse_args(argv)
    for name in ("image_size", "batch_size", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def build_graph(tf, size: int, batch: int):
    """A graph-mode training step: placeholders, three convolutions, softmax loss, Adam."""
    images = tf.compat.v1.placeholder(tf.float32, (batch, size, size, 3), name="images")
    labels = tf.compat.v1.placeholder(tf.int32, (batch,), name="labels")
    x = images
    for filters in (16, 32, 64):
        x = tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = tf.keras.layers.MaxPooling2D()(x)
    logits = tf.keras.layers.Dense(10)(tf.reduce_mean(x, axis=[1, 2]))
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(loss)
    return images, labels, loss, train


def main(argv=None) -> int:
    args = parse_args(argv)
    lms = None
    if not args.no_lms:
        # Before any session exists: LMS is fixed when a GPU's allocator is created.
        from tensorflow_large_model_support import LMS, LmsUnavailableError
        try:
            lms = LMS(swapout_threshold=1, swapin_ahead=0, swapin_groupby=0, sync_mode=0,
                      serialization=[1] if args.serialization else [])
        except (LmsUnavailableError, RuntimeError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1

    import numpy as np
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    size, batch = args.image_size, args.batch_size
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(0)
        images, labels, loss, train = build_graph(tf, size, batch)
        init = tf.compat.v1.global_variables_initializer()
    # TFLMSv2 rewrote the graph here; lmsforge's LMS lives in the allocator, so run() returns
    # the ConfigProto that turns it on for this session.
    config = lms.run(graph) if lms is not None else tf.compat.v1.ConfigProto()
    rng = np.random.default_rng(0)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        session.run(init)
        for _ in range(args.steps):
            feed = {images: rng.random((batch, size, size, 3), dtype=np.float32),
                    labels: rng.integers(0, 10, batch)}
            value, _ = session.run([loss, train], feed_dict=feed)
    print(f"trained {args.steps} steps at {size}x{size}, batch {batch}, "
          f"LMS {'off' if lms is None else 'on'}: loss {value:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
