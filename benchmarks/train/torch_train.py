"""PyTorch training reference for IDunno's training benchmark (run with /usr/bin/python3).

usage: torch_train.py --model M.onnx [--batch 64] [--threads 2] [--optimizer sgd|adam|adamw]
                      [--lr 0.01] [--momentum 0.9] [--nesterov] [--weight-decay 0]
                      [--seconds 20] [--warmup 3] [--data IDX_IMAGES --labels IDX_LABELS]
                      [--scale 1/255] [--dropout-off] [--json]
       torch_train.py --model M.onnx --epochs E --data ... --labels ...
                      --eval-data IDX_IMAGES --eval-labels IDX_LABELS [--seed 1] [...]

Trains, in float32 with torch.set_num_threads(threads), the module that computes the ONNX
graph (built by kernel/torchcheck/train_ref.py's GraphModule, so PyTorch runs the very
architecture and initial weights IDunno trains): softmax cross-entropy on the logits (a
trailing Softmax is dropped), torch.optim.SGD (dampening 0), Adam or AdamW. Dropout nodes
drop at their ratio unless --dropout-off.

Throughput mode (default): after --warmup steps, runs whole steps (zero_grad, forward,
loss, backward, optimizer step) for --seconds and prints samples/s and the median step
time. Batches are cut in order from the data, held in memory as float32 tensors (data
loading is not timed); without --data, one random batch is reused. The JSON also gives
batch / median step time, and the 1-minute load average before and after the window.

Epoch mode (--epochs): trains E epochs over the whole training set in a seeded shuffled
order (the last batch may be short), and after each epoch prints the mean training loss
and the loss and accuracy on the eval set (eval mode: BatchNormalization on its running
statistics, no Dropout).

Data: IDX files (gzip-compressed or not), e.g. Debian's dataset-fashion-mnist in
/usr/share/datasets/fashion-mnist/; images become value*scale, shaped (N, 1, H, W).
"""
import argparse
import gzip
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernel", "torchcheck"))
import train_ref  # noqa: E402  (the one graph builder, shared with the cross-check)


def read_idx(path):
    """An IDX file (magic 0x00000803 images or 0x00000801 labels, uint8) as a numpy array."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise SystemExit(f"torch_train: {path}: not a uint8 IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    body = raw[4 + 4 * ndim:]
    if len(body) != math.prod(dims):
        raise SystemExit(f"torch_train: {path}: shape {dims} needs {math.prod(dims)} bytes, file holds {len(body)}")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def parse_scale(s):
    if "/" in s:
        num, den = s.split("/", 1)
        return float(num) / float(den)
    return float(s)


def load_images(images, labels, scale, shape):
    """Images as float32 (N, C, H, W) tensors scaled by scale, labels as int64."""
    x = read_idx(images)
    y = read_idx(labels).astype(np.int64)
    if x.ndim == 3:
        x = x[:, None]
    if x.shape[0] != y.shape[0]:
        raise SystemExit(f"torch_train: {x.shape[0]} images but {y.shape[0]} labels")
    if shape and tuple(x.shape[1:]) != tuple(shape):
        raise SystemExit(f"torch_train: images are {tuple(x.shape[1:])}, the model wants {tuple(shape)}")
    return torch.from_numpy(x.astype(np.float32) * np.float32(scale)), torch.from_numpy(y)


def model_input_shape(path):
    import onnx
    m = onnx.load(path)
    inits = {t.name for t in m.graph.initializer}
    vi = next(v for v in m.graph.input if v.name not in inits)
    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    return dims[1:] if all(d > 0 for d in dims[1:]) else None


def step(net, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    return loss


def throughput(net, opt, xs, ys, a):
    n = xs.shape[0]
    batches = max(1, n // a.batch)

    def batch(i):
        i %= batches
        return xs[i * a.batch:(i + 1) * a.batch], ys[i * a.batch:(i + 1) * a.batch]

    for i in range(a.warmup):
        step(net, opt, *batch(i))
    load_start = os.getloadavg()[0]
    times, i = [], a.warmup
    start = time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        t0 = time.perf_counter()
        loss = step(net, opt, *batch(i))
        times.append(time.perf_counter() - t0)
        i += 1
    elapsed = time.perf_counter() - start
    res = {"framework": "pytorch", "torch_version": torch.__version__, "model": os.path.basename(a.model),
           "batch": a.batch, "threads": a.threads, "optimizer": a.optimizer, "steps": len(times),
           "seconds": round(elapsed, 3), "samples_per_sec": round(len(times) * a.batch / elapsed, 2),
           "step_ms_median": round(statistics.median(times) * 1000, 3),
           # batch / median step: steadier than the mean when other processes share the cores
           "samples_per_sec_at_median": round(a.batch / statistics.median(times), 2),
           "last_loss": round(loss.item(), 5), "data": os.path.basename(a.data) if a.data else "random",
           "loadavg_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)]}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"torch {res['torch_version']} {res['model']} batch {a.batch}, {a.threads} threads, {a.optimizer}: "
              f"{res['samples_per_sec']} samples/s, median step {res['step_ms_median']} ms ({res['steps']} steps)")


def evaluate(net, xs, ys, batch):
    net.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, xs.shape[0], batch):
            out = net(xs[i:i + batch])
            total += F.cross_entropy(out, ys[i:i + batch], reduction="sum").item()
            correct += (out.argmax(1) == ys[i:i + batch]).sum().item()
    net.train()
    return total / xs.shape[0], correct / xs.shape[0]


def epochs(net, opt, xs, ys, ex, ey, a):
    rng = np.random.default_rng(a.seed)
    out = []
    for e in range(1, a.epochs + 1):
        order = torch.from_numpy(rng.permutation(xs.shape[0]))
        t0, total, seen = time.perf_counter(), 0.0, 0
        for i in range(0, xs.shape[0], a.batch):
            idx = order[i:i + a.batch]
            loss = step(net, opt, xs[idx], ys[idx])
            total += loss.item() * idx.shape[0]
            seen += idx.shape[0]
        train_s = time.perf_counter() - t0
        eval_loss, acc = evaluate(net, ex, ey, 1000)
        rec = {"epoch": e, "train_loss": round(total / seen, 5), "eval_loss": round(eval_loss, 5),
               "eval_accuracy": round(acc, 4), "train_seconds": round(train_s, 1)}
        out.append(rec)
        print(json.dumps(rec) if a.json else
              f"epoch {e}: train loss {rec['train_loss']}, test loss {rec['eval_loss']}, "
              f"test accuracy {rec['eval_accuracy']:.4f} ({rec['train_seconds']} s)", flush=True)
    if a.json:
        print(json.dumps({"framework": "pytorch", "torch_version": torch.__version__,
                          "model": os.path.basename(a.model), "batch": a.batch, "threads": a.threads,
                          "optimizer": a.optimizer, "lr": a.lr, "momentum": a.momentum, "seed": a.seed,
                          "epochs": out}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="sgd")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--nesterov", action="store_true")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--data")
    p.add_argument("--labels")
    p.add_argument("--scale", default="1")
    p.add_argument("--epochs", type=int, default=0)
    p.add_argument("--eval-data")
    p.add_argument("--eval-labels")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dropout-off", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.batch < 1 or a.threads < 1:
        p.error("--batch and --threads must be positive")
    if bool(a.data) != bool(a.labels) or bool(a.eval_data) != bool(a.eval_labels):
        p.error("--data needs --labels and --eval-data needs --eval-labels")
    if a.epochs and not (a.data and a.eval_data):
        p.error("--epochs needs --data, --labels, --eval-data and --eval-labels")
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    try:
        net = train_ref.load_module(a.model, dtype=torch.float32, dropout=not a.dropout_off)
    except train_ref.UnsupportedOp as e:
        print(f"torch_train: unsupported: {e}", file=sys.stderr)
        sys.exit(2)
    except train_ref.BadModel as e:
        sys.exit(f"torch_train: {e}")
    net.train()
    cfg = {"optimizer": a.optimizer, "lr": a.lr, "momentum": a.momentum, "nesterov": a.nesterov,
           "weight_decay": a.weight_decay}
    opt = train_ref.make_optimizer(net.params, cfg)
    shape = model_input_shape(a.model)
    scale = parse_scale(a.scale)
    if a.data:
        xs, ys = load_images(a.data, a.labels, scale, shape)
    else:
        if shape is None:
            sys.exit("torch_train: the model's input shape is not fixed; give --data")
        net.eval()
        with torch.no_grad():
            classes = net(torch.zeros((1, *shape))).shape[1]
        net.train()
        xs, ys = torch.randn((a.batch, *shape)), torch.randint(0, classes, (a.batch,))
    if a.epochs:
        ex, ey = load_images(a.eval_data, a.eval_labels, scale, shape)
        epochs(net, opt, xs, ys, ex, ey, a)
    else:
        throughput(net, opt, xs, ys, a)


if __name__ == "__main__":
    main()
