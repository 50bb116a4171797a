"""Record one training step (forward, backward, optimizer.step) of a model on fake tensors.

Every tensor is a FakeTensor (torch._subclasses.fake_tensor), so nothing is computed and no memory
is used; a TorchDispatchMode above the fake mode sees each ATen operator after autograd, in the
order a GPU would run them.

Storage lifetimes. A storage gets a stable id (0, 1, ...) the first time it is seen. Its free is
the moment its StorageImpl dies: PyTorch keeps one Python object per live StorageImpl (PyObject
preservation), so a weakref.finalize on that object runs exactly when the last reference, from
Python or from C++ (autograd's saved tensors, views), goes away; the refcount does this
deterministically, with no garbage collector involved unless the model makes reference cycles.
Counting references to output tensors ourselves would miss the C++ owners, so we do not.

Streams. Every operator is recorded on the default stream (0): eager PyTorch launches a training
step there unless the model uses streams itself, which a trace on CPU fake tensors cannot see.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from lmsforge.errors import UsageError
from lmsforge.plan.profiles import PROFILES, profile
from lmsforge.plan.trace_format import Op, Storage, Trace

UNTRACEABLE = (DataDependentOutputException, DynamicOutputShapeException,
               UnsupportedOperatorException)
# What a model raises for an input or a loss it cannot take (a picture too small for its
# pooling, a shape its layers refuse): the user's to fix, said in one line.
MODEL_ERRORS = (RuntimeError, TypeError, ValueError, IndexError, AssertionError)


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _written_args(func, args, kwargs) -> list[torch.Tensor]:
    """The arguments the operator's schema marks as written (in-place and out= operators)."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        info = arg.alias_info
        if info is None or not info.is_write:
            continue
        value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        written.extend(_tensors(value))
    return written


class StepRecorder(TorchDispatchMode):
    """Records operators; give it the storages live before the step with `register`."""

    def __init__(self, model_name: str) -> None:
        super().__init__()
        self.model_name = model_name
        self.ops: list[Op] = []
        self.initial: list[Storage] = []
        self._ids: dict[int, int] = {}  # StorageImpl address -> id, only while it lives
        self._next_id = 0
        self.recording = True

    def _freed(self, address: int, sid: int) -> None:
        if self._ids.get(address) == sid:
            del self._ids[address]
        if self.recording and self.ops:
            self.ops[-1].frees.append(sid)

    def _id(self, tensor: torch.Tensor) -> tuple[int, int, bool]:
        """(id, bytes, new) of the tensor's storage."""
        storage = tensor.untyped_storage()
        address = storage._cdata
        if address in self._ids:
            return self._ids[address], storage.nbytes(), False
        sid = self._next_id
        self._next_id += 1
        self._ids[address] = sid
        weakref.finalize(storage, self._freed, address, sid)
        return sid, storage.nbytes(), True

    def register(self, tensors, kind: str) -> None:
        for tensor in _tensors(tensors):
            sid, nbytes, new = self._id(tensor)
            if new:
                self.initial.append(Storage(sid, nbytes, kind))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = _tensors((args, kwargs))
        allocs: list[list[int]] = []
        reads = []
        for tensor in inputs:
            sid, nbytes, new = self._id(tensor)
            if new:  # made outside the dispatcher (a Python scalar lifted): it is new here
                allocs.append([sid, nbytes])
            reads.append(sid)
        try:
            out = func(*args, **kwargs)
        except UNTRACEABLE as err:
            kind = ("its output shape depends on tensor values"
                    if not isinstance(err, UnsupportedOperatorException)
                    else "it has no fake-tensor kernel")
            raise UsageError(f"cannot trace {self.model_name}: operator {func} is not traceable "
                             f"({kind})") from None
        outputs = _tensors(out)
        writes = [self._id(t)[0] for t in _written_args(func, args, kwargs)]
        for tensor in outputs:
            sid, nbytes, new = self._id(tensor)
            if new:
                allocs.append([sid, nbytes])
            if new:  # in-place and out= results are in writes already, views write nothing
                writes.append(sid)
        if not allocs and not writes:
            # A view or metadata operator (t, detach, prim.device) launches no kernel and moves
            # nothing; leaving it out keeps frees on the kernel they follow.
            return out
        flops = 0
        if func.overloadpacket in flop_registry:
            flops = int(flop_registry[func.overloadpacket](*args, **kwargs, out_val=out))
        op = Op(id=len(self.ops), name=str(func), reads=_unique(reads), writes=_unique(writes),
                allocs=allocs, frees=[], stream=0, flops=flops,
                bytes_read=sum(_nbytes(t) for t in inputs),
                bytes_written=sum(_nbytes(t) for t in outputs))
        self.ops.append(op)
        return out


def _unique(ids: list[int]) -> list[int]:
    return list(dict.fromkeys(ids))


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _fake_model(build_model: Callable[[], torch.nn.Module],
                fake_mode: FakeTensorMode) -> torch.nn.Module:
    """The model with fake parameters and buffers. Built inside the fake mode, so that a model
    of any size costs nothing; but some initialisers read values (torch.nn.init.trunc_normal_
    asks `mask.any()`, as ViTs use it), which fake tensors cannot answer: such a model is built
    for real on the CPU, which costs its parameters' memory, and its tensors are made fake."""
    try:
        with fake_mode:
            return build_model()
    except UNTRACEABLE:
        pass
    model = build_model()
    overwrite = torch.__future__.get_overwrite_module_params_on_conversion()
    # New Parameter objects: a fake tensor cannot be assigned to a real parameter's .data.
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        return model._apply(fake_mode.from_tensor)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(overwrite)


def trace_step(build_model: Callable[[], torch.nn.Module],
               make_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               make_optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
               *, model_name: str, input_desc: str, batch: int,
               dtype: str = "float32", profiles: list[str] | None = None) -> Trace:
    """One step of MODEL on fake tensors: forward, loss, backward, optimizer step, then the
    gradients' release by zero_grad(). The model, batch and optimizer are built inside the fake
    mode, so a model of any size costs nothing (but see _fake_model)."""
    names = list(PROFILES) if profiles is None else profiles
    chosen = [profile(n) for n in names]  # an unknown name is refused before any work
    fake_mode = FakeTensorMode()
    model = _fake_model(build_model, fake_mode)
    with fake_mode:
        inputs, target = make_batch()
        optimizer = make_optimizer(list(model.parameters()))
        recorder = StepRecorder(model_name)
        recorder.register(list(model.parameters()), "param")
        recorder.register(list(model.buffers()), "buffer")
        recorder.register([inputs, target], "input")
        with recorder:
            try:
                loss = loss_fn(model(inputs), target)
                loss.backward()
                del loss
                optimizer.step()
            except MODEL_ERRORS as err:  # the model's own: an input it refuses, say
                first = str(err).strip().splitlines()[0] if str(err).strip() else ""
                raise UsageError(f"cannot trace {model_name}: the step raised "
                                 f"{type(err).__name__}: {first}") from None
            # The next step's zero_grad() (set_to_none, PyTorch 2's default) frees the
            # gradients before its forward: recorded here, after the last operator, so that
            # what a step leaves alive is what the next one starts with (optimizer state).
            optimizer.zero_grad(set_to_none=True)
        recorder.recording = False
    for op in recorder.ops:
        moved = op.bytes_read + op.bytes_written
        op.duration_us = {p.name: round(p.op_seconds(op.flops, moved, dtype) * 1e6, 3)
                          if (op.flops or moved) else 0.0 for p in chosen}
    return Trace(model=model_name, input=input_desc, batch=batch, dtype=dtype,
                 torch=torch.__version__, initial=recorder.initial, ops=recorder.ops,
                 profiles=names)
