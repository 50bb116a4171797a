"""The TensorFlow LMS harness: build inputs, the `compile` level and the `core-cpu` level."""
