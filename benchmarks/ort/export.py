"""Exports torchvision classifiers to ONNX for benchmarks/ort (run with /usr/bin/python3).

usage: export.py OUTDIR NAME [NAME ...]

Each NAME is a torchvision.models constructor (resnet50, mobilenet_v2, vit_b_16, swin_v2_t,
...; the driver writes the zoo's transformer_encoder itself with `idunno zoo`). The
model gets seeded random weights (torch.manual_seed(0); BatchNorm running statistics made
non-trivial so BN folding is exercised like a trained model's), is put in eval mode and
exported at 224x224 (299x299 for inception_v3) with opset 17, constant folding and a
symbolic batch dimension to OUTDIR/NAME.onnx. Files already there are kept: the export is
deterministic, so OUTDIR is a cache.
"""
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch
import torch.nn as nn
import torchvision.models as tvm

torch.set_num_threads(2)


# Swin V2 zeroes the key's third of its qkv bias inside forward, which torch 1.13 cannot
# export ('aten::zero'): zeros of the tensor's shape (as kernel/torchcheck/export.py does).
def _zero_symbolic(g, self):
    return g.op("ConstantOfShape", g.op("Shape", self), value_t=torch.tensor([0.0]))


torch.onnx.register_custom_op_symbolic("aten::zero", _zero_symbolic, 9)


def export(outdir, name):
    path = os.path.join(outdir, name + ".onnx")
    if os.path.exists(path):
        return path
    torch.manual_seed(0)
    kwargs = {}
    if name in ("googlenet", "inception_v3"):
        kwargs = {"aux_logits": False, "init_weights": True}
    model = getattr(tvm, name)(weights=None, **kwargs)
    size = 299 if name == "inception_v3" else 224
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_var.copy_(torch.empty(c).uniform_(0.5, 1.5, generator=gen))
        for p in model.parameters():
            if p.dim() >= 2 and float(p.abs().max()) == 0:
                p.normal_(0, 0.05, generator=gen)  # zero-initialised heads (ViT)
    model.eval()
    x = torch.randn(1, 3, size, size, generator=gen)
    tmp = path + ".tmp"
    torch.onnx.export(model, x, tmp, opset_version=17, input_names=["input"], output_names=["output"],
                      do_constant_folding=True, dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    os.replace(tmp, path)
    return path


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    for name in sys.argv[2:]:
        print(export(sys.argv[1], name), flush=True)


if __name__ == "__main__":
    main()
