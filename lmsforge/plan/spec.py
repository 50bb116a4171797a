"""Which training step to trace, from the words a user gives `lmsforge plan`: a built-in model
of models.py (`resnet50`, `unet3d`, `gpt2-medium`), `torchvision:NAME`, or `MODULE:FUNCTION`
(a function of the user's that returns an nn.Module), with an input shape, a batch size and an
optimizer. Bad words are a one-line UsageError before anything is traced."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional
from torch.utils._pytree import tree_flatten

from lmsforge.errors import UsageError
from lmsforge.plan import models
from lmsforge.plan.models import StepSpec

BUILT_IN = {
    # name: (default input, what the input means)
    "resnet50": ("3x224x224", "CxHxW"),
    "unet3d": ("1x64x64x64", "CxDxHxW"),
    "gpt2-medium": ("1024", "tokens"),
}
OPTIMIZERS = ("sgd", "adam", "adamw")
# What each built-in model trains with (models.py); --optimizer overrides it.
BUILT_IN_OPTIMIZER = {"resnet50": "sgd", "unet3d": "adam", "gpt2-medium": "adamw"}
BUILT_IN_BATCH = {"resnet50": 8, "unet3d": 2, "gpt2-medium": 4}


def parse_input(text: str) -> tuple[int, ...]:
    """'3x2048x2048' -> (3, 2048, 2048); positive integers only."""
    if not re.fullmatch(r"[1-9][0-9]*(x[1-9][0-9]*)*", text.strip()):
        raise UsageError(f"--input {text!r}: expected sizes such as 3x224x224 (positive "
                         f"integers joined by x)")
    return tuple(int(part) for part in text.strip().split("x"))


def optimizer_factory(name: str):
    """The optimizer, with foreach=True: what PyTorch picks on CUDA (models.py says why)."""
    if name == "sgd":
        return lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True)
    if name == "adam":
        return lambda params: torch.optim.Adam(params, foreach=True)
    if name == "adamw":
        return lambda params: torch.optim.AdamW(params, foreach=True)
    raise UsageError(f"--optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}")


def _classifier_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return functional.cross_entropy(output, target)


def _any_output_loss(output, target: torch.Tensor) -> torch.Tensor:
    """A loss for whatever a model returns: every tensor in it (Inception's and GoogLeNet's
    auxiliary logits beside the main ones, as torchvision's training adds them), a 2-D one
    (batch, classes) by cross-entropy against random classes, any other by the mean of its
    square: the loss's own memory is small next to the model's either way."""
    tensors = [t for t in tree_flatten(output)[0]
               if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not tensors:
        raise UsageError(f"the model returned no floating-point tensor to train "
                         f"({type(output).__name__})")
    total = None
    for tensor in tensors:
        if tensor.dim() == 2 and tensor.shape[0] == target.shape[0]:
            part = functional.cross_entropy(tensor, target % tensor.shape[1])
        else:
            part = tensor.float().square().mean()
        total = part if total is None else total + part
    return total


def _image_spec(name: str, build, shape: tuple[int, ...], batch: int, optimizer: str,
                classes: int = 1000) -> StepSpec:
    return StepSpec(name, "x".join(map(str, shape)), batch, build,
                    lambda: (torch.randn(batch, *shape), torch.randint(0, classes, (batch,))),
                    _any_output_loss, optimizer_factory(optimizer))


def _user_spec(name: str, build, shape: tuple[int, ...], batch: int,
               optimizer: str) -> StepSpec:
    """A model of the user's: one float input of SHAPE per sample, _any_output_loss."""
    return StepSpec(name, "x".join(map(str, shape)), batch, build,
                    lambda: (torch.randn(batch, *shape), torch.randint(0, 1 << 30, (batch,))),
                    _any_output_loss, optimizer_factory(optimizer))


def _torchvision_builder(name: str):
    try:
        import torchvision  # noqa: F401  (optional: not a dependency of lmsforge)
        from torchvision import models as tv_models
    except Exception as err:  # torchvision built for another torch raises more than ImportError
        raise UsageError(f"torchvision:{name} needs torchvision, which does not import here "
                         f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
                         f"; the built-in models ({', '.join(BUILT_IN)}) need none") from None
    if name not in tv_models.list_models():
        raise UsageError(f"torchvision has no model {name!r}")
    return lambda: tv_models.get_model(name)


def _user_builder(model: str):
    module_name, _, function = model.partition(":")
    if not module_name or not function.isidentifier():
        raise UsageError(f"--model {model!r}: expected a built-in name ({', '.join(BUILT_IN)}), "
                         f"torchvision:NAME or MODULE:FUNCTION")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # a module beside the user, as `python -m` finds it
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise UsageError(f"--model {model}: cannot import {module_name} "
                         f"({type(err).__name__}: {err})") from None
    build = getattr(module, function, None)
    if not callable(build):
        raise UsageError(f"--model {model}: {module_name} has no function {function}")

    def checked():
        made = build()
        if not isinstance(made, nn.Module):
            raise UsageError(f"--model {model}: {function}() returned "
                             f"{type(made).__name__}, not a torch.nn.Module")
        return made

    return checked


def resolve(model: str, input_text: str | None, batch: int | None,
            optimizer: str | None) -> StepSpec:
    """The step to trace for MODEL; INPUT_TEXT or BATCH None take a built-in model's
    default (models.py's benchmark shapes; batch 1 for other models)."""
    if batch is None:
        batch = BUILT_IN_BATCH.get(model, 1)
    if batch < 1:
        raise UsageError(f"--batch {batch}: must be at least 1")
    if optimizer is not None:
        optimizer_factory(optimizer)  # refused now, not after tracing
    if model in BUILT_IN:
        default, meaning = BUILT_IN[model]
        shape = parse_input(input_text or default)
        chosen = optimizer or BUILT_IN_OPTIMIZER[model]
        return _built_in(model, shape, meaning, batch, chosen)
    if input_text is None:
        raise UsageError(f"--model {model} needs --input (the shape of one sample, e.g. "
                         f"3x224x224)")
    shape = parse_input(input_text)
    if model.startswith("torchvision:"):
        name = model.split(":", 1)[1]
        return _image_spec(model, _torchvision_builder(name), shape, batch, optimizer or "sgd")
    return _user_spec(model, _user_builder(model), shape, batch, optimizer or "sgd")


def _built_in(model: str, shape: tuple[int, ...], meaning: str, batch: int,
              optimizer: str) -> StepSpec:
    if model == "resnet50":
        if len(shape) != 3 or shape[0] != 3:
            raise UsageError(f"--input for resnet50 is {meaning} with C = 3, e.g. 3x2048x2048")
        return StepSpec("resnet50", "x".join(map(str, shape)), batch, models.bottleneck_resnet,
                        lambda: (torch.randn(batch, *shape), torch.randint(0, 1000, (batch,))),
                        _classifier_loss, optimizer_factory(optimizer))
    if model == "unet3d":
        if len(shape) != 4 or shape[0] != 1 or any(side % 8 for side in shape[1:]):
            raise UsageError(f"--input for unet3d is {meaning} with C = 1 and sides that are "
                             f"multiples of 8 (three halvings), e.g. 1x64x64x64")
        spec = models.unet3d_step(batch=batch)
        sides = shape[1:]
        return StepSpec("unet3d", "x".join(map(str, shape)), batch, spec.build_model,
                        lambda: (torch.randn(batch, *shape),
                                 torch.randint(0, 2, (batch, *sides))),
                        spec.loss_fn, optimizer_factory(optimizer))
    if len(shape) != 1:
        raise UsageError(f"--input for gpt2-medium is the number of {meaning}, e.g. 1024")
    spec = models.gpt_step(tokens=shape[0], batch=batch)
    return StepSpec("gpt2-medium", f"{shape[0]} tokens", batch, spec.build_model,
                    spec.make_batch, spec.loss_fn, optimizer_factory(optimizer))
