"""What ``crosscheck`` sees of a training step: the autograd graph's convolution nodes (each
backward's graph walked from its roots, a node's saved input, weight and settings read as a
``Call``), the calls that start a backward or run a convolution, and which module of a model ran
each convolution (``ModuleNames``)."""

import itertools
from typing import NamedTuple

import torch

# the calls that start a backward pass (the mode hooks the graph's convolutions first) and the
# Python-level convolutions (a forward after a backward starts a new pass; the module running
# one is noted on its node)
BACKWARDS = frozenset((torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad))
CONVOLUTIONS = frozenset(
    getattr(torch, name)
    for name in (
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "convolution",
        "_convolution",
    )
    if hasattr(torch, name)
)
CONV_NODE = "ConvolutionBackward0"
MODES = itertools.count()  # each mode's own key in node.metadata
MODULE_KEY = "pypto.crosscheck.module"  # node.metadata: the module that ran the forward


def graph_roots(args, kwargs):
    """The tensors a backward call starts from."""
    if args:
        roots = args[0]
    else:
        roots = kwargs.get("tensors", kwargs.get("outputs"))
    if isinstance(roots, torch.Tensor):
        return [roots]
    return [t for t in (roots or ()) if isinstance(t, torch.Tensor)]


def convolution_nodes(roots):
    """Every ConvolutionBackward0 node of the graph below ``roots``."""
    # the visited nodes are kept, not only their ids: a node's Python object can die once
    # dropped, and a new one could reuse its id and be taken for visited
    seen, stack, found = {}, [], []
    for root in roots:
        if root.grad_fn is not None:
            stack.append(root.grad_fn)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if type(node).__name__ == CONV_NODE:
            found.append(node)
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return found


class ModuleNames:
    """Which module of ``model`` ran a convolution: forward hooks keep the innermost module
    running, and the mode notes it on the convolution's autograd node. Without a forward in
    the mode, a weight that is a parameter of the model is named after its module."""

    def __init__(self, model):
        self.model = model
        self._owners = {}  # id(parameter) -> (parameter, module name)
        self._running = []  # names of the modules whose forward is running, innermost last
        self._handles = []
        for name, module in self._modules():
            for p in module.parameters(recurse=False):
                self._owners[id(p)] = (p, name)

    def _modules(self):
        """(name, module) of every module of the model, the model itself by its class."""
        if self.model is None:
            return
        for name, module in self.model.named_modules():
            yield name or type(self.model).__name__, module

    def attach(self):
        if self._handles:
            return
        for name, module in self._modules():
            self._handles.append(module.register_forward_pre_hook(self._entering(name)))
            self._handles.append(module.register_forward_hook(self._leaving))

    def _entering(self, name):
        def hook(module, args):
            self._running.append(name)

        return hook

    def _leaving(self, module, args, output):
        if self._running:
            self._running.pop()

    def detach(self):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._running.clear()

    def running(self):
        """The innermost module whose forward is running, or None."""
        return self._running[-1] if self._running else None

    def of(self, weight):
        owner = self._owners.get(id(weight))
        if owner is not None and owner[0] is weight:
            return owner[1]
        return None


class Call(NamedTuple):
    """A convolution's backward as its autograd node saved it."""

    weight: torch.Tensor
    input_shape: list
    stride: list
    padding: list
    dilation: list
    groups: int
    transposed: bool
    output_padding: list
    module: object  # the module's name, or None


def call_of(node, module):
    return Call(
        node._saved_weight,
        list(node._saved_input.shape),
        list(node._saved_stride),
        list(node._saved_padding),
        list(node._saved_dilation),
        node._saved_groups,
        node._saved_transposed,
        list(node._saved_output_padding),
        module,
    )
