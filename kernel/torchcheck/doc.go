// Package torchcheck cross-checks IDunno's kernel against PyTorch (tests only): torchvision
// models exported by torch.onnx.export at opsets 11 to 17, and the zoo's models run in
// torchvision with the zoo's own weights. export.py, run by /usr/bin/python3, makes the references.
package torchcheck
