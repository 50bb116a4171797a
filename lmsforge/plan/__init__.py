"""Planning a PyTorch model's memory without a GPU: trace/ records one training step on fake
tensors, trace_format/ writes and reads the trace, profiles/ times each operator per GPU;
replay/ runs the step through the series' real allocator on the simulated CUDA runtime (the
program in native/, which the `plan` command has built), planner/ turns the replays into an
answer, tune/ names the LMS settings it tries, plot/ draws memory over the step.

Must not need a GPU: tracing runs on stock CPU PyTorch, which the ``plan`` extra declares
(``pip install 'lmsforge[plan]'``); the rest of lmsforge imports without it. Must not guess: a
model it cannot trace gets a one-line error naming the operator, never a partial trace.
"""
