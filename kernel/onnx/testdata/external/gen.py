# Writes the external-data test models with python3-onnx (Debian's, /usr/bin/python3):
#   inline.onnx               y = Relu(x @ W + b), W and b inside the file
#   model.onnx + weights.bin  the same model saved with save_as_external_data=True
# Run from this folder: /usr/bin/python3 gen.py
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(13)
W = rng.standard_normal((4, 3)).astype(np.float32)
b = rng.standard_normal((3,)).astype(np.float32)
nodes = [
    helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
    helper.make_node("Add", ["h", "b"], ["z"], name="add"),
    helper.make_node("Relu", ["z"], ["y"], name="relu"),
]
g = helper.make_graph(
    nodes, "ext",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    [numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="gen.py")
onnx.checker.check_model(m)
onnx.save_model(m, "inline.onnx")
onnx.save_model(m, "model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                location="weights.bin", size_threshold=0)
