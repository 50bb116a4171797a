"""The model's training step as a graph the offline simulator can play (``docs/tflms-planning.md``).

``model_graph`` traces one training step into a ``tf.function`` concrete function and orders its
operations as TensorFlow's executor tends to run them (``execution_order``: depth first over the
data and control edges). Each tensor's size comes from its inferred static shape; a dimension
still unknown there is taken to be the batch dimension and sized with ``batch_size``.

Memory is counted in *buffers*, not tensors: an operation that only renames its input
(``Identity``, ``Reshape``, ``ReadVariableOp`` ...) shares its input's buffer in TensorFlow's
runtime, so its output costs nothing and keeps the input's buffer alive instead. Variables
(parameters, optimizer slots, batch-norm statistics) are resident for the whole step and counted
apart, in ``resident_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Outputs that share their (first) input's buffer in TensorFlow's kernels.
ALIASING_OPS = frozenset({
    "Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient", "Reshape", "Squeeze",
    "ExpandDims", "EnsureShape", "CheckNumerics", "PlaceholderWithDefault",
})
# Outputs that alias a variable's buffer: the variable is resident, the read costs nothing.
VARIABLE_READ_OPS = frozenset({"ReadVariableOp"})


@dataclass
class Op:
    name: str
    type: str
    inputs: list[int]          # buffer ids read (deduplicated, parameters excluded)
    outputs: list[int]         # buffer ids this op allocates
    level: int = 0             # topological level (longest path from a source)


@dataclass
class Buffer:
    name: str                  # the tensor that allocated it
    nbytes: int
    producer: int              # index of the op that allocates it
    uses: list[int] = field(default_factory=list)  # op indices that read it, ascending
    is_input: bool = False     # a step input (fed batch): no kernel has used it before the step

    @property
    def last_use(self) -> int:
        return self.uses[-1] if self.uses else self.producer


@dataclass
class ModelGraph:
    ops: list[Op]
    buffers: list[Buffer]
    num_edges: int
    parameter_bytes: int       # trainable variables ("learning parameters")
    resident_bytes: int        # every variable: parameters, optimizer slots, statistics
    batch_size: int | None = None
    unknown_shape_tensors: int = 0  # data tensors sized with batch_size for an unknown dimension

    @property
    def num_levels(self) -> int:
        return 1 + max((op.level for op in self.ops), default=-1)

    def working_set(self, index: int) -> int:
        """Bytes operation INDEX needs on the device while it runs: its inputs and outputs."""
        op = self.ops[index]
        return sum(self.buffers[b].nbytes for b in set(op.inputs) | set(op.outputs))


def human_bytes(nbytes: int) -> str:
    """NBYTES in the largest unit that keeps it >= 1: B, KiB, MiB or GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


def tensor_bytes(shape: list[int | None], dtype_size: int, batch_size: int | None) -> tuple[int, bool]:
    """Bytes of a dense tensor; unknown dimensions count as BATCH_SIZE (or 1 when there is none).
    Returns (bytes, whether a dimension was unknown)."""
    unknown = False
    elements = 1
    for dim in shape:
        if dim is None:
            unknown = True
            dim = batch_size or 1
        elements *= dim
    return elements * dtype_size, unknown


def model_graph(model_or_concrete_function, batch_size: int | None = None) -> ModelGraph:
    """The graph of one training step of a Keras model, or of a concrete function as it is."""
    import tensorflow as tf

    if batch_size is not None and (type(batch_size) is not int or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
    if isinstance(model_or_concrete_function, tf.keras.Model):
        function = keras_training_step(model_or_concrete_function, batch_size)
    elif hasattr(model_or_concrete_function, "graph") and hasattr(model_or_concrete_function,
                                                                  "structured_input_signature"):
        function = model_or_concrete_function
        _check_inputs_known(function, batch_size)
    else:
        raise TypeError("model_graph takes a Keras model or a tf.function concrete function, not "
                        f"{type(model_or_concrete_function).__name__}")
    return graph_of(function.graph, batch_size)


def _check_inputs_known(function, batch_size: int | None) -> None:
    if batch_size is not None:
        return
    for tensor in function.inputs:
        if tensor.dtype.name != "resource" and not tensor.shape.is_fully_defined():
            raise ValueError(f"input {tensor.name} has shape {tensor.shape} with an unknown "
                             "dimension: pass batch_size= to size it")


def keras_training_step(model, batch_size: int | None):
    import tensorflow as tf

    if not model.inputs:
        raise ValueError("the Keras model has no known inputs: build it (call it once, or give "
                         "it an Input) before model_graph")

    def spec(tensor, what: str) -> tf.TensorSpec:
        dims = list(tensor.shape)
        if dims and dims[0] is None:
            if batch_size is None:
                raise ValueError(f"{what} {tensor.name} has an unknown batch dimension "
                                 f"{tensor.shape}: pass batch_size= to size it")
            dims[0] = batch_size
        if any(d is None for d in dims):
            raise ValueError(f"{what} {tensor.name} has an unknown dimension {tensor.shape} "
                             "besides the batch: give the model fixed input shapes")
        return tf.TensorSpec(dims, tensor.dtype)

    x_specs = [spec(t, "input") for t in model.inputs]
    y_specs = [label_spec(spec(t, "output"), sparse)
               for t, sparse in zip(model.outputs, sparse_labels(model))]
    optimizer = getattr(model, "optimizer", None)
    compiled = optimizer is not None and getattr(model, "compiled_loss", None) is not None
    if compiled and hasattr(optimizer, "build"):
        optimizer.build(model.trainable_variables)  # slots exist before tracing, as in fit()

    def unpack(specs_values):
        return specs_values[0] if len(specs_values) == 1 else list(specs_values)

    @tf.function
    def step(xs, ys):
        x, y = unpack(xs), unpack(ys)
        with tf.GradientTape() as tape:
            prediction = model(x, training=True)
            if compiled:
                loss = model.compute_loss(x=x, y=y, y_pred=prediction)
            else:
                loss = tf.add_n([tf.reduce_sum(p) for p in tf.nest.flatten(prediction)])
        gradients = tape.gradient(loss, model.trainable_variables)
        if compiled:
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss
        return loss, gradients

    try:
        return step.get_concrete_function(x_specs, y_specs)
    except (ValueError, TypeError, tf.errors.InvalidArgumentError) as error:
        # TensorFlow puts the traceback of the user's code first and the reason last.
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        why = lines[-1] if lines else type(error).__name__
        raise ValueError(f"the training step of this Keras model could not be traced ({why}): "
                         "pass model_graph a concrete function of the step instead") from None


def label_spec(output_spec, sparse: bool):
    """The labels an output is trained against: the output's shape, or, for a sparse loss, the
    class index of each sample (the output's shape without its class dimension, integers)."""
    import tensorflow as tf

    if not sparse:
        return output_spec
    return tf.TensorSpec(output_spec.shape[:-1], tf.int32)


def sparse_labels(model) -> list[bool]:
    """For each output of MODEL, whether its compiled loss takes class indices
    (sparse_categorical_crossentropy, as a name, a function or a Loss object) rather than labels
    shaped like the output."""
    loss = getattr(model, "loss", None)
    names = list(getattr(model, "output_names", None) or [])
    if isinstance(loss, dict):
        per_output = [loss.get(name) for name in names]
    elif isinstance(loss, (list, tuple)):
        per_output = list(loss) + [None] * (len(model.outputs) - len(loss))
    else:
        per_output = [loss] * len(model.outputs)
    return [_is_sparse_loss(item) for item in per_output]


def _is_sparse_loss(loss) -> bool:
    if loss is None:
        return False
    if isinstance(loss, str):
        name = loss
    else:
        # A Loss object names its function (fn) or is a subclass; a plain function has a name.
        function = getattr(loss, "fn", None)
        name = " ".join(str(part) for part in (type(loss).__name__,
                                               getattr(loss, "__name__", ""),
                                               getattr(function, "__name__", "")))
    return "sparse" in name.lower()


def execution_order(operations: list) -> list:
    """OPERATIONS (a topological order) in the order TensorFlow's executor tends to run them: an
    operation runs once its data and control inputs are done, and the thread that finishes one
    goes on with an operation it made ready (depth first; ties in creation order).

    Creation order alone would run every optimizer update after the whole backward pass, keeping
    all gradients alive at once; breadth first starts the gradients of many layers together.
    Depth first came closest to the CPU-measured peaks (docs/tflms-planning.md)."""
    position = {op.name: i for i, op in enumerate(operations)}
    waiting: list[int] = []
    successors: list[list[int]] = [[] for _ in operations]
    for i, op in enumerate(operations):
        sources = {position[t.op.name] for t in op.inputs if t.op.name in position}
        sources |= {position[c.name] for c in op.control_inputs if c.name in position}
        waiting.append(len(sources))
        for source in sources:
            successors[source].append(i)
    # A stack: the last pushed runs next; pushing in reverse creation order runs the earliest first.
    ready = [i for i, count in enumerate(waiting) if count == 0][::-1]
    order = []
    while ready:
        i = ready.pop()
        order.append(operations[i])
        made_ready = []
        for successor in successors[i]:
            waiting[successor] -= 1
            if waiting[successor] == 0:
                made_ready.append(successor)
        ready.extend(sorted(made_ready, reverse=True))
    if len(order) != len(operations):
        raise ValueError("the graph has a cycle: it cannot be simulated")
    return order


def graph_of(graph, batch_size: int | None = None) -> ModelGraph:
    """Reads a TensorFlow FuncGraph (or Graph) into a ModelGraph."""
    operations = execution_order(graph.get_operations())
    index_of = {op.name: i for i, op in enumerate(operations)}
    buffers: list[Buffer] = []
    buffer_of: dict[str, int | None] = {}   # tensor name -> buffer id (None: variable or empty)
    ops: list[Op] = []
    edges = 0
    unknown = 0
    input_tensors = {t.name for t in getattr(graph, "inputs", [])}

    for i, tf_op in enumerate(operations):
        edges += len(tf_op.inputs) + len(tf_op.control_inputs)
        read = []
        for tensor in tf_op.inputs:
            buffer = buffer_of.get(tensor.name)
            if buffer is not None and buffer not in read:
                read.append(buffer)
        level = 0
        for source in [t.op for t in tf_op.inputs] + list(tf_op.control_inputs):
            if source.name in index_of and index_of[source.name] < i:
                level = max(level, ops[index_of[source.name]].level + 1)
        allocated = []
        for position, tensor in enumerate(tf_op.outputs):
            if tf_op.type in VARIABLE_READ_OPS or tensor.dtype.name in ("resource", "variant",
                                                                       "string"):
                buffer_of[tensor.name] = None
                continue
            if tf_op.type in ALIASING_OPS and tf_op.inputs:
                source = tf_op.inputs[min(position, len(tf_op.inputs) - 1)]
                buffer_of[tensor.name] = buffer_of.get(source.name)
                continue
            dims = tensor.shape.as_list() if tensor.shape.rank is not None else []
            nbytes, was_unknown = tensor_bytes(dims, tensor.dtype.size, batch_size)
            if tensor.shape.rank is None:
                # Unknown rank: in these graphs, kernels' side outputs (FusedBatchNorm's reserve
                # space) and their ZerosLike in the gradient, small on a GPU. Sized 0.
                nbytes, was_unknown = 0, False
            # Unknown shape vectors (BroadcastGradientArgs) are tiny: only data tensors count.
            unknown += was_unknown and tensor.dtype.is_floating
            buffer_of[tensor.name] = len(buffers)
            allocated.append(len(buffers))
            buffers.append(Buffer(tensor.name, nbytes, i, is_input=tensor.name in input_tensors))
        ops.append(Op(tf_op.name, tf_op.type, read, allocated, level))
        for buffer in read:
            buffers[buffer].uses.append(i)

    variables = list(getattr(graph, "variables", []))
    trainable = list(getattr(graph, "trainable_variables", []))

    def size(v) -> int:
        return int(v.shape.num_elements() or 0) * v.dtype.size

    # Variables captured by value (a Keras model's, an optimizer's) are the function's variables.
    return ModelGraph(ops, buffers, edges, sum(size(v) for v in trainable),
                      sum(size(v) for v in variables), batch_size, unknown)
