"""Statistics of the weights PyTorch gives freshly constructed torchvision modules.

TestTorchInit (torchinit_test.go; torchvisionReference in torchvision_test.go runs this)
compares the zoo's Init "torch" with them. Usage: torch_init.py SEED CLASSES ARCH...;
prints one JSON object:
{arch: {"params": {state_dict key: {shape, n, mean, std, min, max, kurt}},
        "dropouts": [[module name, p, next module with parameters], ...]}}
where n, mean, std, min, max and kurt describe at most the first 2^20 values.
"""
import json
import sys

import torch
import torch.nn as nn
import torchvision


class LeNet5(nn.Module):
    """The classic LeNet-5 as the zoo writes it (1x28x28 input, padding 2 on conv1)."""

    def __init__(self, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)


def build(arch, classes):
    if arch == "lenet5":
        return LeNet5(classes)
    if arch == "squeezenet":
        return torchvision.models.squeezenet1_0(num_classes=classes)
    if arch == "inception_v3":
        return torchvision.models.inception_v3(num_classes=classes, init_weights=True)
    return getattr(torchvision.models, arch)(num_classes=classes)


def stats(t):
    # The draws are independent: the first 2^20 values are a fair sample of a large tensor.
    x = t.detach().flatten()[: 1 << 20].double()
    n = x.numel()
    mean = x.mean().item()
    d = x - mean
    var = (d * d).mean().item()
    kurt = ((d ** 4).mean().item() / (var * var)) if var > 0 else 0.0
    return {"shape": list(t.shape), "n": n, "mean": mean, "std": var ** 0.5,
            "min": x.min().item(), "max": x.max().item(), "kurt": kurt}


def main():
    seed, classes, archs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    out = {}
    for arch in archs:
        torch.manual_seed(seed)
        m = build(arch, classes)
        params = {k: stats(v) for k, v in m.state_dict().items()
                  if not k.endswith("num_batches_tracked") and not k.startswith("AuxLogits.")}
        mods = [(name, mod) for name, mod in m.named_modules() if not name.startswith("AuxLogits")]
        drops = []
        for i, (name, mod) in enumerate(mods):
            if isinstance(mod, nn.Dropout):
                nxt = next(n for n, mm in mods[i + 1:] if list(mm.parameters(recurse=False)))
                drops.append([name, mod.p, nxt])
        out[arch] = {"params": params, "dropouts": drops}
        del m
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
