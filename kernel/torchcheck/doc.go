// Package torchcheck cross-checks IDunno's kernel against PyTorch (tests only): torchvision
// models and a torch.nn.TransformerEncoder text classifier exported by torch.onnx.export
// at opsets 11 to 17 (some also rewritten as opsets 18 to 21 write them), and the zoo's
// models run in torchvision (and its text model in that TransformerEncoder module) with
// the zoo's own weights (export.py makes those references; TORCHCHECK_ONLY=a,b
// exports only the matching torch cases, cached apart from the full set); and training:
// train_ref.py builds a torch module from any ONNX graph of the trainable ops and trains it
// (float64 by default), so the kernel's losses, gradients and weights after SGD and Adam
// steps are compared with PyTorch's, and exported trained models are run in PyTorch.
// Every script runs with /usr/bin/python3 (Debian's python3-torch, python3-onnx).
package torchcheck
