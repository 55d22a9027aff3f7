"""How often PyTorch's own float32 training agrees with float64 within a bound (run with
/usr/bin/python3): the ceiling for any float32 trainer checked against train_ref.py.

usage: float32_agreement.py --model M.onnx [--seeds 0:6] [--batch 8] [--steps 3]
                            [--optimizer sgd --lr 0.01 --momentum 0.9]

For each seed, draws a batch (numpy default_rng(seed): standard normal images of the
model's input shape, uniform labels over its classes), runs kernel/torchcheck/train_ref.py
in float64 and float32, and prints per step the largest relative difference of any
gradient and any weight (each relative to its tensor's largest magnitude) and the float64
run's smallest decision margin (see margins.json).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_REF = os.path.join(HERE, "..", "..", "kernel", "torchcheck", "train_ref.py")


def worst(a, b, sub):
    w = 0.0
    for f in os.listdir(os.path.join(a, sub)):
        x, y = np.load(os.path.join(a, sub, f)), np.load(os.path.join(b, sub, f))
        m = np.abs(x).max()
        if m:
            w = max(w, float(np.abs(x - y).max() / m))
    return w


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--seeds", default="0:6", help="FIRST:END, END excluded")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    a = p.parse_args()
    m = onnx.load(a.model)
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim][1:]
    classes = m.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    first, end = (int(v) for v in a.seeds.split(":"))
    cfg = {"optimizer": a.optimizer, "lr": a.lr, "momentum": a.momentum, "steps": a.steps}
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "cfg.json"), "w") as f:
            json.dump(cfg, f)
        for seed in range(first, end):
            rng = np.random.default_rng(seed)
            np.save(os.path.join(tmp, "x.npy"), rng.standard_normal((a.batch, *dims)).astype(np.float32))
            np.save(os.path.join(tmp, "y.npy"), rng.integers(0, classes, a.batch).astype(np.int64))
            for d in ("float64", "float32"):
                subprocess.run([sys.executable, TRAIN_REF, "--model", a.model, "--x", os.path.join(tmp, "x.npy"),
                                "--y", os.path.join(tmp, "y.npy"), "--config", os.path.join(tmp, "cfg.json"),
                                "--out", os.path.join(tmp, d), "--dtype", d], check=True)
            r64, r32 = os.path.join(tmp, "float64"), os.path.join(tmp, "float32")
            with open(os.path.join(r64, "margins.json")) as f:
                margins = json.load(f)
            cols = []
            for k in range(a.steps):
                cols.append(f"step {k + 1}: grad {worst(r64, r32, f'grad_{k}'):.1e} "
                            f"weights {worst(r64, r32, f'after_{k + 1}'):.1e} margin {margins[k]['margin'] or float('inf'):.1e}")
            print(f"seed {seed}: " + "; ".join(cols), flush=True)


if __name__ == "__main__":
    main()
