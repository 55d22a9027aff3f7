"""Reference outputs from PyTorch for IDunno's cross-check test (run with /usr/bin/python3).

usage: export.py [--torchvision OUTDIR] [--zoo ZOODIR]

With --torchvision, for every case below: builds the model with random weights (fixed seed,
BatchNormalization statistics randomised so BN folding is exercised), exports it with
torch.onnx.export at the case's opset to OUTDIR/<case>/model.onnx, and writes the input
and torch's output as ONNX TensorProto files (input_0.pb, output_0.pb).

For every zoo model ZOODIR/<name>/model.onnx (written by `idunno zoo`): loads its
initializers into the matching torchvision module (the zoo names its initializers like
torchvision's state_dict keys; every key must match in name and shape), runs the input
ZOODIR/<name>/input_0.pb, and writes torch's output to ZOODIR/<name>/output_0.pb.

Writes manifest.json into OUTDIR and ZOODIR listing the cases done there.
"""
import json
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore")

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torchvision.models as tvm

torch.set_num_threads(2)


# torchvision's Swin V2 zeroes the key's third of its qkv bias inside forward (zero_ on a
# slice of a clone of the parameter), which torch 1.13 cannot export ('aten::zero' has no
# symbolic): export it as zeros of the tensor's shape. The slice assignment becomes
# ScatterND on constants, which IDunno's compiler folds. No other model calls zero_.
def _zero_symbolic(g, self):
    return g.op("ConstantOfShape", g.op("Shape", self), value_t=torch.tensor([0.0]))


torch.onnx.register_custom_op_symbolic("aten::zero", _zero_symbolic, 9)

# (case name, torchvision constructor, kwargs, input shape NCHW, opset, constant folding
# [, "dynbatch"] [, "bnrandom"]). With constant folding torch folds BatchNormalization
# into Conv itself; without it the file keeps BatchNormalization (and more constant
# subgraphs) for IDunno's compiler to fold. A "dynbatch" case is exported at batch 1 with a
# symbolic batch dimension and checked at the batch of its input shape. A "bnrandom" case
# gets mild random BatchNorm statistics (randomize_bn) instead of calibrated ones.
CASES = [
    ("resnet18_op11_nofold", "resnet18", {}, (1, 3, 64, 64), 11, False),
    ("resnet18_op17_b2", "resnet18", {}, (2, 3, 64, 64), 17, True),
    ("resnet50_op13", "resnet50", {}, (1, 3, 64, 64), 13, True),
    ("resnet18_op13_dynbatch3", "resnet18", {}, (3, 3, 64, 64), 13, True, "dynbatch"),
    ("alexnet_op12", "alexnet", {}, (1, 3, 224, 224), 12, True),
    ("vgg11_op14", "vgg11", {}, (1, 3, 224, 224), 14, True),
    ("squeezenet1_0_op11", "squeezenet1_0", {}, (1, 3, 64, 64), 11, True),
    ("squeezenet1_1_op16_b2", "squeezenet1_1", {}, (2, 3, 64, 64), 16, True),
    ("mobilenet_v2_op13", "mobilenet_v2", {}, (1, 3, 64, 64), 13, True),
    ("mobilenet_v2_op15_nofold", "mobilenet_v2", {}, (1, 3, 96, 96), 15, False),
    ("googlenet_op14", "googlenet", {"aux_logits": False, "init_weights": True}, (1, 3, 64, 64), 14, True),
    ("inception_v3_op16", "inception_v3", {"aux_logits": False, "init_weights": True}, (1, 3, 96, 96), 16, True),
    ("densenet121_op17", "densenet121", {}, (1, 3, 64, 64), 17, True),
    # issue 13: the other torchvision families (small inputs keep the suite quick)
    ("resnext50_32x4d_op13", "resnext50_32x4d", {}, (1, 3, 64, 64), 13, True),
    ("wide_resnet50_2_op14", "wide_resnet50_2", {}, (1, 3, 64, 64), 14, True),
    ("mobilenet_v3_small_op17", "mobilenet_v3_small", {}, (1, 3, 64, 64), 17, True),
    ("mobilenet_v3_large_op13_nofold", "mobilenet_v3_large", {}, (1, 3, 64, 64), 13, False),
    ("mnasnet0_5_op13", "mnasnet0_5", {}, (1, 3, 64, 64), 13, True),
    ("shufflenet_v2_x0_5_op14", "shufflenet_v2_x0_5", {}, (2, 3, 64, 64), 14, True),
    ("efficientnet_b0_op15", "efficientnet_b0", {}, (1, 3, 64, 64), 15, True),
    ("regnet_y_400mf_op16", "regnet_y_400mf", {}, (1, 3, 64, 64), 16, True),
    ("regnet_x_400mf_op13", "regnet_x_400mf", {}, (1, 3, 64, 64), 13, True),
    ("convnext_tiny_op17", "convnext_tiny", {}, (1, 3, 64, 64), 17, True),
    ("convnext_tiny_op14", "convnext_tiny", {}, (1, 3, 64, 64), 14, True),
    ("swin_t_op17", "swin_t", {}, (1, 3, 64, 64), 17, True),
    ("swin_v2_t_op17", "swin_v2_t", {}, (1, 3, 64, 64), 17, True),  # cosine attention: ReduceL2
    ("efficientnet_v2_s_op16", "efficientnet_v2_s", {}, (1, 3, 64, 64), 16, True, "bnrandom"),
    # torchvision's VisionTransformer class at a small size (vit_b_16 is the same code
    # with 12 layers of width 768 at 224x224)
    ("vit_small_op17", "VisionTransformer", {"image_size": 32, "patch_size": 8, "num_layers": 2, "num_heads": 4,
                                             "hidden_dim": 64, "mlp_dim": 128, "num_classes": 10}, (2, 3, 32, 32), 17, True),
    ("vit_small_op14", "VisionTransformer", {"image_size": 32, "patch_size": 8, "num_layers": 2, "num_heads": 4,
                                             "hidden_dim": 64, "mlp_dim": 128, "num_classes": 10}, (1, 3, 32, 32), 14, True),
    # torchvision's MaxVit class at a small size (maxvit_t is the same code at 224x224 with
    # partitions of 7): block and grid attention through Einsum, relative position bias
    ("maxvit_small_op17", "MaxVit", {"input_size": (64, 64), "stem_channels": 32, "partition_size": 2,
                                     "block_channels": [32, 64, 128, 256], "block_layers": [1, 1, 1, 1],
                                     "head_dim": 16, "stochastic_depth_prob": 0.0, "num_classes": 10},
     (1, 3, 64, 64), 17, True),
]

# BERT-style text classifiers (name, opset, batch, length, vocab, layers, heads, width):
# token embedding by Gather on int64 ids, learned position embeddings, an int64 attention
# mask (1 = token, 0 = padding) turned into torch.nn.TransformerEncoder's key padding
# mask, mean pooling over the real tokens, LayerNorm and a linear head.
TEXT_CASES = [
    ("text_encoder_op17", 17, 2, 16, 1000, 2, 4, 64),
    ("text_encoder_op14", 14, 3, 12, 500, 1, 2, 32),
]


class TextEncoder(nn.Module):
    def __init__(self, vocab, length, layers, heads, width, classes=5):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(length, width)
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                           activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        h = self.tok(ids) + self.pos(pos)
        h = self.enc(h, src_key_padding_mask=mask == 0)
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1)
        return self.head(self.norm(pooled))


def export_text_case(outdir, case, seed):
    name, opset, batch, length, vocab, layers, heads, width = case
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = TextEncoder(vocab, length, layers, heads, width).eval()
    ids = torch.randint(0, vocab, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.int64)
    for b in range(1, batch):
        mask[b, length - 3 * b:] = 0  # padded rows
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    with torch.no_grad():
        y = model(ids, mask)
    # Exported with grad enabled: nn.MultiheadAttention then skips its fused fast path,
    # which has no ONNX export.
    torch.onnx.export(model, (ids, mask), os.path.join(d, "model.onnx"), opset_version=opset,
                      input_names=["ids", "mask"], output_names=["output"])
    save_tensor(ids.numpy(), os.path.join(d, "input_0.pb"), "ids")
    save_tensor(mask.numpy(), os.path.join(d, "input_1.pb"), "mask")
    save_tensor(y.detach().numpy(), os.path.join(d, "output_0.pb"), "output")
    return {"name": name, "dir": d, "source": "torch.nn.TransformerEncoder", "model": "text_encoder", "opset": opset,
            "input_shape": [batch, length], "max_abs_output": float(y.abs().max())}


def calibrate_bn(model, shape, gen):
    """Sets BatchNorm statistics as training would (from random batches), then perturbs
    the affine parameters, so activations stay O(1) and BN is far from the identity."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(4, *shape[1:], generator=gen))
    for m in bns:
        c = m.num_features
        m.weight.data = torch.empty(c).uniform_(0.5, 1.5, generator=gen)
        m.bias.data = torch.randn(c, generator=gen) * 0.1


def randomize_bn(model, gen):
    """Sets mild random BatchNorm statistics and affine parameters (mean ~0.1, variance
    0.5-1.5): for the deep nets whose calibrated statistics let eval activations grow
    until float32 itself cannot give a reference (efficientnet_v2_s: logits of 1e5, torch's
    fp32 and fp64 outputs 64% apart)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_var.copy_(torch.empty(c).uniform_(0.5, 1.5, generator=gen))
                m.weight.data = torch.empty(c).uniform_(0.5, 1.5, generator=gen)
                m.bias.data = torch.randn(c, generator=gen) * 0.1


def save_tensor(arr, path, name):
    t = numpy_helper.from_array(np.ascontiguousarray(arr), name=name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def export_case(outdir, case, seed):
    name, ctor, kwargs, shape, opset, fold = case[:6]
    dynbatch = "dynbatch" in case[6:]
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    if ctor == "VisionTransformer":
        from torchvision.models.vision_transformer import VisionTransformer
        model = VisionTransformer(**kwargs)
    elif ctor == "MaxVit":
        from torchvision.models.maxvit import MaxVit
        model = MaxVit(**kwargs)
    else:
        model = getattr(tvm, ctor)(weights=None, **kwargs)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and float(p.abs().max()) == 0:
                p.normal_(0, 0.05, generator=gen)  # zero-initialised heads (ViT) would give all-zero outputs
    if "bnrandom" in case[6:]:
        randomize_bn(model, gen)
    else:
        calibrate_bn(model, shape, gen)
    model.eval()
    x = torch.randn(*shape, generator=gen)
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    with torch.no_grad():
        y = model(x)
    # Exported with grad enabled: nn.MultiheadAttention (ViT) then skips its fused fast
    # path, which has no ONNX export; the other models export the same graph either way.
    dyn = {"input": {0: "N"}, "output": {0: "N"}} if dynbatch else None
    torch.onnx.export(model, x[:1] if dynbatch else x, os.path.join(d, "model.onnx"), opset_version=opset,
                      input_names=["input"], output_names=["output"], do_constant_folding=fold,
                      dynamic_axes=dyn)
    save_tensor(x.numpy(), os.path.join(d, "input_0.pb"), "input")
    save_tensor(y.numpy(), os.path.join(d, "output_0.pb"), "output")
    y = y.detach()
    return {"name": name, "dir": d, "source": "torchvision", "model": ctor, "opset": opset,
            "constant_folding": fold, "dynamic_batch": dynbatch, "input_shape": list(shape), "max_abs_output": float(y.abs().max())}


class LeNet5(nn.Module):
    """LeNet-5 with the zoo's layer names."""

    def __init__(self, in_ch, classes, flat):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(flat, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


ZOO_TO_TORCH = {
    "resnet18": lambda k: tvm.resnet18(weights=None, num_classes=k),
    "resnet50": lambda k: tvm.resnet50(weights=None, num_classes=k),
    "alexnet": lambda k: tvm.alexnet(weights=None, num_classes=k),
    "vgg16": lambda k: tvm.vgg16(weights=None, num_classes=k),
    "mobilenet_v2": lambda k: tvm.mobilenet_v2(weights=None, num_classes=k),
    "squeezenet": lambda k: tvm.squeezenet1_0(weights=None, num_classes=k),
    "inception_v3": lambda k: tvm.inception_v3(weights=None, num_classes=k, aux_logits=False, init_weights=False),
}


# The zoo text model's initializers that are constants of its graph, not weights.
TEXT_CONSTANTS = ("one", "half", "sqrt2", "neg_big", "inv_sqrt_dh")


def zoo_text_case(zoodir, name):
    """Runs the zoo's transformer_encoder in the TextEncoder above: its weights are the
    torch module's, Linear weights stored transposed (weight_t) and the attention's q, k, v
    projections separate where torch stacks them (in_proj_weight, in_proj_bias)."""
    d = os.path.join(zoodir, name)
    m = onnx.load(os.path.join(d, "model.onnx"))
    w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in m.graph.initializer}
    ids = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "input_0.pb")))
    mask = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "input_1.pb")))
    vocab, width = w["tok.weight"].shape
    length = w["pos.weight"].shape[0]
    heads = int(w["shape_heads"][2])
    layers = len({k.split(".")[2] for k in w if k.startswith("enc.layers.")})
    classes = w["head.weight_t"].shape[1]
    model = TextEncoder(vocab, length, layers, heads, width, classes).eval()
    state, used = {}, set()
    for k in model.state_dict():
        if k.endswith("in_proj_weight") or k.endswith("in_proj_bias"):
            p = k.rsplit(".", 1)[0]
            kind = "weight_t" if k.endswith("weight") else "bias"
            parts = [w[f"{p}.{q}.{kind}"] for q in "qkv"]
            used.update(f"{p}.{q}.{kind}" for q in "qkv")
            state[k] = torch.cat([t.T for t in parts]) if kind == "weight_t" else torch.cat(parts)
        elif k.endswith(".weight") and k[:-len("weight")] + "weight_t" in w:
            state[k] = w[k[:-len("weight")] + "weight_t"].T
            used.add(k[:-len("weight")] + "weight_t")
        elif k in w:
            state[k] = w[k]
            used.add(k)
        else:
            raise SystemExit(f"zoo {name}: no weight for torch's {k}")
    unused = [k for k in w if k not in used and k not in TEXT_CONSTANTS and not k.startswith(("axes_", "shape_"))]
    if unused:
        raise SystemExit(f"zoo {name}: initializers torch does not use: {unused[:5]}")
    model.load_state_dict(state)
    with torch.no_grad():
        y = model(torch.from_numpy(ids), torch.from_numpy(mask))
    save_tensor(y.numpy(), os.path.join(d, "output_0.pb"), "output")
    return {"name": "zoo_" + name, "dir": d, "source": "zoo", "model": name, "opset": m.opset_import[0].version,
            "input_shape": list(ids.shape), "max_abs_output": float(y.abs().max())}


def zoo_case(zoodir, name):
    if name == "transformer_encoder":
        return zoo_text_case(zoodir, name)
    d = os.path.join(zoodir, name)
    m = onnx.load(os.path.join(d, "model.onnx"))
    weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in m.graph.initializer}
    x = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "input_0.pb")))
    arch = name
    if arch == "lenet5":
        flat = weights["fc1.weight"].shape[1]
        model = LeNet5(x.shape[1], weights["fc3.weight"].shape[0], flat)
    else:
        model = ZOO_TO_TORCH[arch](model_classes(weights, arch))
    state = model.state_dict()
    missing = [k for k in state if k not in weights and not k.endswith("num_batches_tracked")]
    unused = [k for k in weights if k not in state and not k.startswith("clip_")]
    if missing or unused:
        raise SystemExit(f"zoo {name}: state_dict mismatch: missing {missing[:5]}, unexpected {unused[:5]}")
    for k in weights:
        if k in state and tuple(state[k].shape) != tuple(weights[k].shape):
            raise SystemExit(f"zoo {name}: {k} has shape {tuple(weights[k].shape)}, torch wants {tuple(state[k].shape)}")
    model.load_state_dict({k: v for k, v in weights.items() if k in state}, strict=False)
    model.eval()
    with torch.no_grad():
        y = model(torch.from_numpy(x))
    save_tensor(y.numpy(), os.path.join(d, "output_0.pb"), "output")
    return {"name": "zoo_" + name, "dir": d, "source": "zoo", "model": arch, "opset": 13,
            "input_shape": list(x.shape), "max_abs_output": float(y.abs().max())}


def model_classes(weights, arch):
    last = {"resnet18": "fc.weight", "resnet50": "fc.weight", "inception_v3": "fc.weight",
            "alexnet": "classifier.6.weight", "vgg16": "classifier.6.weight",
            "mobilenet_v2": "classifier.1.weight", "squeezenet": "classifier.1.weight"}[arch]
    return weights[last].shape[0]


def main():
    args = sys.argv[1:]
    outdir = zoodir = None
    while args:
        if args[0] == "--torchvision" and len(args) > 1:
            outdir, args = args[1], args[2:]
        elif args[0] == "--zoo" and len(args) > 1:
            zoodir, args = args[1], args[2:]
        else:
            raise SystemExit(__doc__)
    # TORCHCHECK_ONLY: comma-separated substrings; only the cases whose name has one
    only = [o for o in os.environ.get("TORCHCHECK_ONLY", "").split(",") if o]
    if outdir:
        os.makedirs(outdir, exist_ok=True)
        done = []
        for i, case in enumerate(CASES):
            if only and not any(o in case[0] for o in only):
                continue
            t0 = time.time()
            done.append(export_case(outdir, case, seed=100 + i))
            print(f"exported {case[0]} in {time.time() - t0:.1f}s", file=sys.stderr)
        for i, case in enumerate(TEXT_CASES):
            if only and not any(o in case[0] for o in only):
                continue
            t0 = time.time()
            done.append(export_text_case(outdir, case, seed=300 + i))
            print(f"exported {case[0]} in {time.time() - t0:.1f}s", file=sys.stderr)
        write_manifest(outdir, done)
    if zoodir:
        done = []
        for name in sorted(os.listdir(zoodir)):
            if not os.path.isdir(os.path.join(zoodir, name)):
                continue
            t0 = time.time()
            done.append(zoo_case(zoodir, name))
            print(f"ran zoo {name} in torch in {time.time() - t0:.1f}s", file=sys.stderr)
        write_manifest(zoodir, done)


def write_manifest(d, done):
    # Relative directories, so a cached export can be moved.
    for c in done:
        c["dir"] = os.path.basename(c["dir"])
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(done, f, indent=1)


if __name__ == "__main__":
    main()
