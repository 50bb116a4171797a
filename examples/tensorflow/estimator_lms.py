#!/usr/bin/env python3
"""Train a tf.estimator linear regressor on synthetic data with TFLMSv2's ``LMS`` hook, as
TFLMSv2's Estimator users did (``hooks=[lms_hook]``).

Needs TensorFlow built from lmsforge's LMS series; on a stock TensorFlow it stops with one line
saying an LMS build is needed (``--no-lms`` trains without it):

    python3 examples/tensorflow/estimator_lms.py --steps 100 --stats-csv lms-stats.csv
"""

from __future__ import annotations

import argparse
import sys
import tempfile


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--no-lms", action="store_true", help="train without Large Model Support")
    parser.add_argument("--stats-csv", help="per-step LMS statistics to this CSV")
    parser.add_argument("--model-dir", help="Estimator checkpoints (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1:
        parser.error("--steps and --batch-size must be >= 1")

    hooks = []
    if not args.no_lms:
        # At the start of the program: a hook cannot turn LMS on once the GPUs exist.
        from tensorflow_large_model_support import LMS, LmsUnavailableError
        try:
            lms_hook = LMS(swapout_threshold=1, swapin_ahead=0, swapin_groupby=0, sync_mode=0)
        except (LmsUnavailableError, RuntimeError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        lms_hook.batch_size = args.batch_size
        lms_hook.stats_csv = args.stats_csv
        hooks.append(lms_hook)

    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    features = rng.normal(size=(1024, 8)).astype(np.float32)
    targets = features @ rng.normal(size=(8, 1)).astype(np.float32)

    def train_input_fn():
        data = tf.data.Dataset.from_tensor_slices(({"x": features}, targets))
        return data.shuffle(1024, seed=0).batch(args.batch_size).repeat()

    model_dir = args.model_dir or tempfile.mkdtemp(prefix="estimator-lms-")
    estimator = tf.estimator.LinearRegressor(
        [tf.feature_column.numeric_column("x", shape=(8,))], model_dir=model_dir)
    estimator.train(input_fn=train_input_fn, max_steps=args.steps, hooks=hooks)
    print(f"trained {args.steps} steps, LMS {'off' if args.no_lms else 'on'}; "
          f"checkpoints in {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
