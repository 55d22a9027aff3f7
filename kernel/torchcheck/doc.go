// Package torchcheck cross-checks IDunno's kernel against PyTorch (tests only): torchvision
// models exported by torch.onnx.export at opsets 11 to 17, and the zoo's models run in
// torchvision with the zoo's own weights (export.py makes those references); and training:
// train_ref.py builds a torch module from any ONNX graph of the trainable ops and trains it
// (float64 by default), so the kernel's losses, gradients and weights after SGD and Adam
// steps are compared with PyTorch's, and exported trained models are run in PyTorch.
// Every script runs with /usr/bin/python3 (Debian's python3-torch, python3-onnx).
package torchcheck
