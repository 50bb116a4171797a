"""Planning a PyTorch model's memory without a GPU: trace/ records one training step on fake
tensors, trace_format/ writes and reads the trace, profiles/ times each operator per GPU;
replay/ runs the step through the series' real allocator on the simulated CUDA runtime (the
program in native/, which the `plan` command has built), planner/ turns the replays into an
answer, tune/ names the LMS settings it tries, plot/ draws memory over the step. bound/ and
fluid_bound/ give the least time any schedule of a step can take under a limit (a cut in
milliseconds; a linear program in minutes), clairvoyant/ the schedules that know the step's
future, on schedule_device/'s model of the device.

Must not need a GPU: tracing runs on stock CPU PyTorch, which the ``plan`` extra declares
(``pip install 'lmsforge[plan]'``); the rest of lmsforge imports without it. Must not guess: a
model it cannot trace gets a one-line error naming the operator, never a partial trace.
"""
