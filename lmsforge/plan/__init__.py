"""Planning a PyTorch model's memory without a GPU: trace/ records one training step on fake
tensors, trace_format/ writes and reads the trace, profiles/ times each operator per GPU.

Must not need a GPU or the series' build: it runs on stock CPU PyTorch, which the ``plan`` extra
declares (``pip install 'lmsforge[plan]'``); the rest of lmsforge imports without it. Must not guess: a model it
cannot trace gets a one-line error naming the operator, never a partial trace.
"""
