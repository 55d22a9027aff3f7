"""Training reference from PyTorch for IDunno's trainer (run with /usr/bin/python3).

usage: train_ref.py --model M.onnx --x x.npy --y y.npy --config cfg.json --out DIR
                    [--dtype float64|float32] [--threads N] [--dropout-off]

Builds a torch.nn.Module that computes exactly the ONNX graph (GraphModule below, also used
by benchmarks/train/torch_train.py), then trains it for cfg["steps"] optimizer steps with
softmax cross-entropy (integer labels, mean over the batch) and writes, all float64 .npy:

  DIR/loss.npy           (STEPS,) the loss of each step's forward, before its update
  DIR/logits_0.npy       the first training-mode forward's output
  DIR/logits_eval.npy    an eval-mode forward of the first batch before training
                         (BatchNormalization on the running statistics)
  DIR/grad_K/P.npy       for K in 0..STEPS-1, the gradient of trainable parameter P in
                         step K+1, before its update (grad_0 is the first step's)
  DIR/after_K/P.npy      for K in 1..STEPS, every float initializer P after the K-th step
                         (trainable parameters, BatchNormalization running statistics and
                         the graph's other float constants, which do not change)
  DIR/margins.json       per step, the forward's smallest decision margin and where it is:
                         min |ReLU/LeakyRelu/Clip input - threshold| and min gap between
                         a MaxPool window's largest and second-largest value, each
                         relative to that tensor's largest magnitude (exact zeros and ties
                         excluded). Another implementation whose rounding error reaches
                         the margin may route a gradient differently: compare gradients
                         within 1e-4 only where the margin is well above float32 noise
  DIR/names.json         {"P.npy": initializer name} for every file in grad_K and after_K;
                         a name unsafe as a file name is sanitised and given a hash suffix

x.npy is float32 (N, C, H, W), or (STEPS, N, C, H, W) for a different batch per step;
y.npy is int64 (N,) or (STEPS, N). cfg.json holds {"optimizer": "sgd"|"adam"|"adamw",
"lr", "momentum", "nesterov", "weight_decay", "betas", "eps", "steps"}; missing keys take
torch's defaults (weight_decay 0 for every optimizer), unknown keys are an error.

Trainable parameters are the float initializers read as Conv W/B, Gemm B/C, MatMul B and
BatchNormalization scale/bias; BatchNormalization mean/var are buffers updated in training
mode as running = running*momentum + batch*(1-momentum), with the unbiased batch variance
(torch's nn.BatchNorm semantics with torch momentum = 1 - ONNX momentum). Every other
initializer is a constant. Dropout is the identity (random masks cannot match another
implementation's; --dropout-off says so explicitly and is the default here). A trailing
Softmax/LogSoftmax on the graph output is dropped, so the loss takes logits.

Exit status: 0 on success, 2 for an op outside the training op set (the message names the
node), 1 for any other bad input.
"""
import argparse
import hashlib
import json
import math
import os
import re
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

# Inputs of each op that are trainable parameters when they are float initializers.
TRAINABLE_SLOTS = {"Conv": (1, 2), "Gemm": (1, 2), "MatMul": (1,), "BatchNormalization": (1, 2)}
# Inputs that are buffers (updated by the forward, not by the optimizer).
BUFFER_SLOTS = {"BatchNormalization": (3, 4)}

OPS = {"Conv", "Gemm", "MatMul", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "MaxPool",
       "AveragePool", "GlobalAveragePool", "BatchNormalization", "Add", "Flatten", "Reshape",
       "Concat", "Dropout", "Identity", "Constant"}

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16}


class UnsupportedOp(Exception):
    """An op (or an attribute of one) outside the training op set; exit status 2."""


class BadModel(Exception):
    """A model the builder cannot use for training (exit status 1)."""


def log(msg):
    print(f"train_ref: {msg}", file=sys.stderr)


def node_label(node, index):
    return node.name or f"#{index} ({node.op_type})"


def decimal(v):
    """A float32 attribute as the shortest decimal that rounds to it (BatchNormalization's
    momentum 0.9f is 0.9, not 0.8999999762), as the exporter meant it; other values as they are."""
    if isinstance(v, float):
        return float(str(np.float32(v)))
    if isinstance(v, list) and v and all(isinstance(f, float) for f in v):
        return [decimal(f) for f in v]
    return v


class Node:
    """One ONNX node with its attributes decoded to Python values."""

    def __init__(self, proto, index):
        self.op = proto.op_type
        self.domain = proto.domain
        self.name = node_label(proto, index)
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.attrs = {a.name: decimal(helper.get_attribute_value(a)) for a in proto.attribute}

    def attr(self, key, default=None):
        return self.attrs.get(key, default)

    def input(self, ins, i):
        """The i-th input value, or None when it is absent or named ''."""
        return ins[i] if i < len(ins) else None


class GraphModule(nn.Module):
    """The ONNX graph as a torch module: trainable parameters in self.params (named by
    self.param_names), BatchNormalization statistics as buffers (self.buffer_names),
    everything else constant. forward(x) returns the graph's (single) output, without a
    trailing Softmax/LogSoftmax."""

    def __init__(self, model, dtype=torch.float64, dropout=False):
        super().__init__()
        g = model.graph
        self.dtype = dtype
        self.dropout = dropout
        self.margin = None  # (inf, "") makes forward record its smallest margin (record_margin)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        inits = {t.name: t for t in g.initializer}
        inputs = [vi.name for vi in g.input if vi.name not in inits]
        if len(inputs) != 1 or len(g.output) != 1:
            raise BadModel(f"the graph has {len(inputs)} inputs and {len(g.output)} outputs; training wants one of each")
        self.input_name = inputs[0]
        self.output_name = g.output[0].name
        nodes = [Node(n, i) for i, n in enumerate(g.node)]
        nodes = self._drop_trailing_softmax(nodes)
        for n in nodes:
            if n.domain not in ("", "ai.onnx") or n.op not in OPS:
                raise UnsupportedOp(f"op {n.domain + '.' if n.domain else ''}{n.op} in node {n.name}")

        trainable, buffers = [], []
        for n in nodes:
            for slot in TRAINABLE_SLOTS.get(n.op, ()):
                name = n.inputs[slot] if slot < len(n.inputs) else ""
                if name in inits and inits[name].data_type in FLOAT_TYPES and name not in trainable:
                    trainable.append(name)
        for n in nodes:
            for slot in BUFFER_SLOTS.get(n.op, ()):
                name = n.inputs[slot] if slot < len(n.inputs) else ""
                if name in inits and inits[name].data_type in FLOAT_TYPES and name not in trainable + buffers:
                    buffers.append(name)
        arrays = {name: numpy_helper.to_array(t) for name, t in inits.items()}
        self.param_names = trainable
        self.params = nn.ParameterList([nn.Parameter(self._tensor(arrays[n])) for n in trainable])
        self.buffer_names = buffers
        for i, n in enumerate(buffers):
            self.register_buffer(f"buffer{i}", self._tensor(arrays[n]))
        # Constants: float ones in the model's dtype, others (Reshape shapes) as int64.
        self.consts = {n: self._tensor(a) for n, a in arrays.items() if n not in trainable and n not in buffers}
        self.const_names = [n for n in arrays if n not in trainable and n not in buffers
                            and inits[n].data_type in FLOAT_TYPES]
        self.nodes = []
        for n in nodes:
            if n.op == "Constant":
                self.consts[n.outputs[0]] = self._tensor(constant_value(n))
            else:
                self.nodes.append(n)

    def _tensor(self, a):
        a = np.array(a)  # copies; to_array's arrays may be read-only
        if a.dtype.kind == "f":
            return torch.from_numpy(a).to(self.dtype)
        return torch.from_numpy(a.astype(np.int64))

    def _drop_trailing_softmax(self, nodes):
        last = next((n for n in nodes if self.output_name in n.outputs), None)
        if last is None or last.op not in ("Softmax", "LogSoftmax"):
            return nodes
        if any(last.outputs[0] in n.inputs for n in nodes):
            raise UnsupportedOp(f"op {last.op} in node {last.name} (its output is used inside the graph)")
        log(f"dropped the trailing {last.op} (node {last.name}): the loss takes logits")
        self.output_name = last.inputs[0]
        return [n for n in nodes if n is not last]

    def named_state(self):
        """Every float initializer by ONNX name: parameters, buffers and constants."""
        out = {n: p for n, p in zip(self.param_names, self.params)}
        out.update({n: getattr(self, f"buffer{i}") for i, n in enumerate(self.buffer_names)})
        out.update({n: self.consts[n] for n in self.const_names})
        return out

    def forward(self, x):
        env = dict(self.consts)
        env.update(zip(self.param_names, self.params))
        env.update({n: getattr(self, f"buffer{i}") for i, n in enumerate(self.buffer_names)})
        env[self.input_name] = x
        for n in self.nodes:
            ins = [env[name] if name else None for name in n.inputs]
            outs = getattr(self, "op_" + n.op)(n, ins)
            for name, v in zip(n.outputs, outs):
                if name:
                    env[name] = v
        return env[self.output_name]

    def record_margin(self, kind, m):
        """Keeps the smallest margin of the forward: how far (relative to the tensor's
        largest magnitude) a value is from flipping a decision that routes gradients, i.e.
        a ReLU or Clip input from its threshold, or a MaxPool window's largest value from
        the runner-up. An implementation rounding differently near a small margin may
        decide the other way, and then its gradients differ by far more than rounding."""
        if self.margin is not None and m < self.margin[0]:
            self.margin = (m, kind)

    def _threshold_margin(self, kind, x, *bounds):
        if self.margin is None or x.numel() == 0:
            return
        x = x.detach()
        scale = x.abs().max().item()
        for b in bounds:
            if b is None:
                continue
            d = (x - b).abs()
            d = d[d > 0]
            if d.numel() and scale > 0:
                self.record_margin(kind, d.min().item() / scale)

    def _pool_margin(self, n, x, k, s, pads, dil):
        if self.margin is None or len(k) != 2 or x.numel() == 0:
            return
        x = x.detach()
        xp, _ = pad_input(x, pads, -math.inf, force=True)
        cols = F.unfold(xp, k, dilation=dil, stride=s)  # (N, C*kh*kw, L)
        cols = cols.reshape(x.shape[0], x.shape[1], k[0] * k[1], -1)
        if cols.shape[2] < 2:
            return
        top = cols.topk(2, dim=2).values
        gap = top[:, :, 0] - top[:, :, 1]
        gap = gap[(gap > 0) & torch.isfinite(gap)]
        scale = x.abs().max().item()
        if gap.numel() and scale > 0:
            self.record_margin(f"MaxPool {n.name}", gap.min().item() / scale)

    # --- ops: each takes the node and its input values and returns its output values ---

    def op_Conv(self, n, ins):
        x, w, b = ins[0], ins[1], n.input(ins, 2)
        nd = w.dim() - 2
        strides = n.attr("strides", [1] * nd)
        dil = n.attr("dilations", [1] * nd)
        pads = resolve_pads(n, x.shape[2:], list(w.shape[2:]), strides, dil)
        x, padding = pad_input(x, pads, 0.0)
        conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
        return [conv(x, w, b, strides, padding, dil, n.attr("group", 1))]

    def op_Gemm(self, n, ins):
        a, b, c = ins[0], ins[1], n.input(ins, 2)
        alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
        ta, tb = n.attr("transA", 0), n.attr("transB", 0)
        if not ta and tb and alpha == 1 and beta == 1 and (c is None or c.dim() == 1):
            return [F.linear(a, b, c)]  # what nn.Linear runs
        y = (a.t() if ta else a) @ (b.t() if tb else b)
        if alpha != 1:
            y = y * alpha
        if c is not None:
            y = y + (c * beta if beta != 1 else c)
        return [y]

    def op_MatMul(self, n, ins):
        return [torch.matmul(ins[0], ins[1])]

    def op_Relu(self, n, ins):
        self._threshold_margin(f"Relu {n.name}", ins[0], 0.0)
        return [F.relu(ins[0])]

    def op_LeakyRelu(self, n, ins):
        self._threshold_margin(f"LeakyRelu {n.name}", ins[0], 0.0)
        return [F.leaky_relu(ins[0], float(n.attr("alpha", 0.01)))]

    def op_Sigmoid(self, n, ins):
        return [torch.sigmoid(ins[0])]

    def op_Tanh(self, n, ins):
        return [torch.tanh(ins[0])]

    def op_Clip(self, n, ins):
        if self.opset < 11:
            lo, hi = n.attr("min"), n.attr("max")
        else:
            lo, hi = n.input(ins, 1), n.input(ins, 2)
            lo = lo.item() if lo is not None and lo.numel() == 1 else lo
            hi = hi.item() if hi is not None and hi.numel() == 1 else hi
        if lo is None and hi is None:
            return [ins[0]]
        if not torch.is_tensor(lo) and not torch.is_tensor(hi):
            self._threshold_margin(f"Clip {n.name}", ins[0], lo, hi)
        return [torch.clamp(ins[0], lo, hi)]

    def op_MaxPool(self, n, ins):
        if len(n.outputs) > 1 and n.outputs[1]:
            raise UnsupportedOp(f"MaxPool's Indices output in node {n.name}")
        x = ins[0]
        k = n.attr("kernel_shape")
        nd = len(k)
        s, dil = n.attr("strides", [1] * nd), n.attr("dilations", [1] * nd)
        pads = resolve_pads(n, x.shape[2:], k, s, dil)
        ceil = bool(n.attr("ceil_mode", 0))
        pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[nd - 1]
        self._pool_margin(n, x, k, s, pads, dil)
        if pads[:nd] == pads[nd:] and all(p <= kk // 2 for p, kk in zip(pads, k)):
            return [pool(x, k, s, pads[:nd], dil, ceil)]
        # torch pads at most half a window, and only symmetrically: pad with -inf by hand.
        x, _ = pad_input(x, pads, -math.inf, force=True)
        return [pool(x, k, s, 0, dil, ceil)]

    def op_AveragePool(self, n, ins):
        x = ins[0]
        k = n.attr("kernel_shape")
        nd = len(k)
        if any(d != 1 for d in n.attr("dilations", [1] * nd)):
            raise UnsupportedOp(f"AveragePool with dilations in node {n.name}")
        s = n.attr("strides", [1] * nd)
        pads = resolve_pads(n, x.shape[2:], k, s, [1] * nd)
        ceil = bool(n.attr("ceil_mode", 0))
        include = bool(n.attr("count_include_pad", 0))  # ONNX's default is 0, torch's True
        pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[nd - 1]
        if pads[:nd] == pads[nd:] and all(p <= kk // 2 for p, kk in zip(pads, k)):
            return [pool(x, k, s, pads[:nd], ceil, include)]
        xp, _ = pad_input(x, pads, 0.0, force=True)
        y = pool(xp, k, s, 0, ceil, True)
        if include:
            return [y]
        # Divide by the share of each window that covers real input, not padding.
        ones, _ = pad_input(torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype), pads, 0.0, force=True)
        return [y / pool(ones, k, s, 0, ceil, True)]

    def op_GlobalAveragePool(self, n, ins):
        x = ins[0]
        return [x.mean(dim=tuple(range(2, x.dim())), keepdim=True)]

    def op_BatchNormalization(self, n, ins):
        x, scale, bias, mean, var = ins[:5]
        m = float(n.attr("momentum", 0.9))
        y = F.batch_norm(x, mean, var, scale, bias, self.training, 1.0 - m, float(n.attr("epsilon", 1e-5)))
        return [y, mean, var]  # opset 14's optional outputs are the updated statistics

    def op_Add(self, n, ins):
        return [ins[0] + ins[1]]

    def op_Flatten(self, n, ins):
        x = ins[0]
        axis = n.attr("axis", 1)
        axis = axis + x.dim() if axis < 0 else axis
        return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]

    def op_Reshape(self, n, ins):
        x, shape = ins[0], ins[1]
        if shape.dtype != torch.int64 or shape.requires_grad:
            raise UnsupportedOp(f"Reshape with a computed shape in node {n.name}")
        shape = shape.tolist()
        if not n.attr("allowzero", 0):
            shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return [x.reshape(shape)]

    def op_Concat(self, n, ins):
        return [torch.cat([t for t in ins if t is not None], dim=n.attr("axis"))]

    def op_Dropout(self, n, ins):
        x = ins[0]
        ratio = n.attr("ratio", 0.5) if self.opset < 12 else n.input(ins, 1)
        ratio = float(ratio.item()) if torch.is_tensor(ratio) else float(0.5 if ratio is None else ratio)
        wants_mask = len(n.outputs) > 1 and n.outputs[1]
        if not (self.dropout and self.training) or ratio == 0:
            return [x, torch.ones_like(x, dtype=torch.bool)] if wants_mask else [x]
        if not wants_mask:
            return [F.dropout(x, ratio, True)]  # what nn.Dropout runs
        mask = torch.rand_like(x) >= ratio
        return [x * mask / (1 - ratio), mask]

    def op_Identity(self, n, ins):
        return [ins[0]]


def constant_value(n):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in n.attrs:
            v = n.attrs[key]
            if key == "value":
                return numpy_helper.to_array(v)
            return np.array(v, dtype=np.float32 if "float" in key else np.int64)
    raise UnsupportedOp(f"Constant without a value, value_float(s) or value_int(s) attribute in node {n.name}")


def resolve_pads(n, spatial, kernel, strides, dilations):
    """The node's pads as [begin..., end...], with auto_pad resolved for this input."""
    nd = len(kernel)
    auto = n.attr("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        return list(n.attr("pads", [0] * (2 * nd)))
    if auto == "VALID":
        return [0] * (2 * nd)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedOp(f"auto_pad {auto} in node {n.name}")
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        begins.append(small if auto == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return begins + ends


def pad_input(x, pads, value, force=False):
    """Returns (x, padding for torch): symmetric pads go to torch as padding unless force;
    others are applied here with F.pad and torch gets padding 0."""
    nd = len(pads) // 2
    begins, ends = pads[:nd], pads[nd:]
    if begins == ends and not force:
        return x, begins
    flat = []
    for b, e in reversed(list(zip(begins, ends))):  # F.pad lists the last dimension first
        flat += [b, e]
    if any(flat):
        x = F.pad(x, flat, value=value)
    return x, [0] * nd


class TorchvisionNet(nn.Module):
    """torchvision's (or export.py's LeNet-5) module for a zoo architecture, holding the
    ONNX file's weights, with GraphModule's interface: an independent cross-check of the
    graph builder. Only for zoo models, whose initializers are named like the module's
    state_dict; every name and shape must match."""

    def __init__(self, arch, model, graph_net):
        super().__init__()
        sys.dont_write_bytecode = True  # no __pycache__ in the source tree
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import export  # beside this file; export.py holds the zoo-to-torchvision mapping
        weights = {t.name: torch.from_numpy(np.array(numpy_helper.to_array(t))) for t in model.graph.initializer}
        if arch == "lenet5":
            w = weights["conv1.weight"]
            tv = export.LeNet5(w.shape[1], weights["fc3.weight"].shape[0], weights["fc1.weight"].shape[1])
        elif arch in export.ZOO_TO_TORCH:
            tv = export.ZOO_TO_TORCH[arch](export.model_classes(weights, arch))
        else:
            raise BadModel(f"--torchvision: no torchvision module for {arch!r}")
        fit_input_channels(tv, weights)
        tv = tv.to(graph_net.dtype)
        state = tv.state_dict()
        keys = [k for k in state if not k.endswith("num_batches_tracked")]
        if sorted(keys) != sorted(graph_net.param_names + graph_net.buffer_names):
            raise BadModel(f"--torchvision {arch}: state_dict keys differ from the graph's parameters and statistics")
        for k in keys:
            if tuple(state[k].shape) != tuple(weights[k].shape):
                raise BadModel(f"--torchvision {arch}: {k} has shape {tuple(weights[k].shape)}, torch wants {tuple(state[k].shape)}")
        tv.load_state_dict({k: weights[k].to(graph_net.dtype) for k in keys}, strict=False)
        self.tv = tv
        self.dtype = graph_net.dtype
        self.margin = None
        named = dict(tv.named_parameters())
        self.param_names = graph_net.param_names
        self.params = [named[n] for n in self.param_names]
        self.buffer_names = graph_net.buffer_names

    def named_state(self):
        state = self.tv.state_dict()
        return {n: state[n] for n in self.param_names + self.buffer_names}

    def forward(self, x):
        return self.tv(x)


def fit_input_channels(tv, weights):
    """Rebuilds the first convolution when the zoo model takes another channel count than
    torchvision's default (ResNet-18 on 1-channel images)."""
    for name, mod in list(tv.named_modules()):
        w = weights.get(name + ".weight")
        if isinstance(mod, nn.Conv2d) and w is not None and w.shape[1] * mod.groups != mod.in_channels:
            new = nn.Conv2d(w.shape[1] * mod.groups, mod.out_channels, mod.kernel_size, mod.stride, mod.padding,
                            mod.dilation, mod.groups, mod.bias is not None)
            parent = tv.get_submodule(name.rpartition(".")[0]) if "." in name else tv
            setattr(parent, name.rpartition(".")[2], new)


def load_module(path, dtype=torch.float64, dropout=False):
    """Reads an ONNX file and builds its GraphModule (raises UnsupportedOp, BadModel)."""
    try:
        model = onnx.load(path)
    except Exception as e:  # onnx raises DecodeError, OSError, ...
        raise BadModel(f"{path}: {e}") from e
    return GraphModule(model, dtype=dtype, dropout=dropout)


# --- the reference run ---

CONFIG_KEYS = {"optimizer", "lr", "momentum", "nesterov", "weight_decay", "betas", "eps", "steps"}


def read_config(path):
    with open(path) as f:
        cfg = json.load(f)
    if not isinstance(cfg, dict):
        raise BadModel(f"{path}: not a JSON object")
    unknown = set(cfg) - CONFIG_KEYS
    if unknown:
        raise BadModel(f"{path}: unknown keys {sorted(unknown)} (known: {sorted(CONFIG_KEYS)})")
    if cfg.get("optimizer") not in ("sgd", "adam", "adamw"):
        raise BadModel(f"{path}: optimizer {cfg.get('optimizer')!r}, want sgd, adam or adamw")
    if not isinstance(cfg.get("steps", 1), int) or cfg.get("steps", 1) < 1:
        raise BadModel(f"{path}: steps {cfg.get('steps')!r}, want an integer >= 1")
    if "lr" not in cfg:
        raise BadModel(f"{path}: lr missing")
    return cfg


def make_optimizer(params, cfg):
    wd = float(cfg.get("weight_decay", 0.0))
    if cfg["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=float(cfg["lr"]), momentum=float(cfg.get("momentum", 0.0)),
                               dampening=0, weight_decay=wd, nesterov=bool(cfg.get("nesterov", False)))
    betas = tuple(float(b) for b in cfg.get("betas", (0.9, 0.999)))
    eps = float(cfg.get("eps", 1e-8))
    ctor = torch.optim.Adam if cfg["optimizer"] == "adam" else torch.optim.AdamW
    return ctor(params, lr=float(cfg["lr"]), betas=betas, eps=eps, weight_decay=wd)


def read_batches(xpath, ypath, steps):
    """Per-step inputs and labels: one batch reused, or one per step."""
    x, y = np.load(xpath), np.load(ypath)
    if x.dtype != np.float32 or y.dtype != np.int64:
        raise BadModel(f"x is {x.dtype} and y is {y.dtype}; want float32 and int64")
    if y.ndim == 1 and x.ndim >= 2 and x.shape[0] == y.shape[0]:
        return [x] * steps, [y] * steps
    if y.ndim == 2 and x.ndim >= 3 and x.shape[:2] == y.shape:
        if x.shape[0] != steps:
            raise BadModel(f"x holds {x.shape[0]} batches for {steps} steps")
        return list(x), list(y)
    raise BadModel(f"x shape {x.shape} and y shape {y.shape} do not fit: want (N, ...) and (N,), or (STEPS, N, ...) and (STEPS, N)")


def file_name(name):
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,150}", name):
        return name + ".npy"
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100].lstrip(".")
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:12]}.npy"


def save(path, t):
    np.save(path, t.detach().to(torch.float64).numpy())


def train(net, xs, ys, cfg, out):
    os.makedirs(out, exist_ok=True)
    state = net.named_state()
    files = {file_name(n): n for n in state}
    if len(files) != len(state):
        raise BadModel("two initializer names map to the same file name")
    with open(os.path.join(out, "names.json"), "w") as f:
        json.dump(files, f, indent=1, sort_keys=True)
    by_name = {n: fn for fn, n in files.items()}
    opt = make_optimizer(net.params, cfg)
    x0 = torch.from_numpy(xs[0]).to(net.dtype)
    net.eval()
    with torch.no_grad():
        save(os.path.join(out, "logits_eval.npy"), net(x0))
    net.train()
    losses, margins = [], []
    for k in range(len(xs)):
        x, y = torch.from_numpy(xs[k]).to(net.dtype), torch.from_numpy(ys[k])
        opt.zero_grad(set_to_none=True)
        net.margin = (math.inf, "")
        logits = net(x)
        margins.append({"margin": net.margin[0] if net.margin[0] < math.inf else None, "where": net.margin[1]})
        net.margin = None
        if logits.dim() != 2 or logits.shape[0] != y.shape[0]:
            raise BadModel(f"the model's output has shape {tuple(logits.shape)}; the loss wants (N, classes) with N = {y.shape[0]}")
        if int(y.min()) < 0 or int(y.max()) >= logits.shape[1]:
            raise BadModel(f"labels span {int(y.min())}..{int(y.max())}, the model has {logits.shape[1]} classes")
        loss = F.cross_entropy(logits, y)
        loss.backward()
        losses.append(loss.item())
        if k == 0:
            save(os.path.join(out, "logits_0.npy"), logits)
        d = os.path.join(out, f"grad_{k}")
        os.makedirs(d, exist_ok=True)
        for n, p in zip(net.param_names, net.params):
            if p.grad is None and k == 0:
                log(f"{n} gets no gradient (not on the path to the output): writing zeros")
            save(os.path.join(d, by_name[n]), p.grad if p.grad is not None else torch.zeros_like(p))
        opt.step()
        d = os.path.join(out, f"after_{k + 1}")
        os.makedirs(d, exist_ok=True)
        for n, t in net.named_state().items():
            save(os.path.join(d, by_name[n]), t)
    np.save(os.path.join(out, "loss.npy"), np.array(losses, dtype=np.float64))
    with open(os.path.join(out, "margins.json"), "w") as f:
        json.dump(margins, f, indent=1)


def deterministic(threads):
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
    except (AttributeError, TypeError):
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--x", required=True)
    p.add_argument("--y", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dropout-off", action="store_true",
                   help="Dropout as the identity (always so here: masks cannot match)")
    p.add_argument("--torchvision", metavar="ARCH",
                   help="train torchvision's module for zoo architecture ARCH with the file's weights "
                        "instead of the module built from the graph (a cross-check of the builder)")
    a = p.parse_args()
    deterministic(a.threads)
    try:
        cfg = read_config(a.config)
        xs, ys = read_batches(a.x, a.y, cfg.get("steps", 1))
        net = load_module(a.model, dtype=getattr(torch, a.dtype), dropout=False)
        if a.torchvision:
            net = TorchvisionNet(a.torchvision, onnx.load(a.model), net)
        train(net, xs, ys, cfg, a.out)
    except UnsupportedOp as e:
        print(f"train_ref: unsupported: {e}", file=sys.stderr)
        sys.exit(2)
    except (BadModel, OSError, ValueError) as e:
        print(f"train_ref: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
