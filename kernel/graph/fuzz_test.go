package graph

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"idunno/kernel/onnx"
)

// FuzzCompile decodes arbitrary bytes as a model and compiles it with shapes taken from
// its declared inputs: Compile must return a graph or an error, never panic or hang.
func FuzzCompile(f *testing.F) {
	r := rand.New(rand.NewSource(1))
	f.Add(onnx.Encode(resnetBlock(r, true).m))
	for _, c := range []string{"node/test_conv_with_strides_padding", "node/test_reshape_negative_dim",
		"node/test_slice_neg_steps", "node/test_maxpool_2d_ceil", "node/test_gemm_all_attributes", "simple/test_expand_shape_model1",
		"node/test_top_k", "node/test_resize_upsample_scales_cubic", "node/test_resize_tf_crop_and_resize",
		"node/test_resize_downsample_sizes_nearest", "node/test_upsample_nearest",
		"node/test_qlinearconv", "node/test_qlinearmatmul_3D", "node/test_convinteger_with_padding", "node/test_matmulinteger",
		"node/test_dequantizelinear_axis", "node/test_quantizelinear_axis",
		"node/test_reduce_l2_do_not_keepdims_example", "node/test_reduce_prod_default_axes_keepdims_example",
		"node/test_mul_uint8"} {
		if b, err := os.ReadFile(filepath.Join(backendData, c, "model.onnx")); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := onnx.Decode(data)
		if err != nil || m.Validate() != nil {
			return
		}
		shapes := map[string][]int64{}
		consts := map[string]*onnx.Tensor{}
		need := ConstantInputs(m)
		for _, in := range m.Graph.Inputs {
			if _, init := m.Graph.Initializers[in.Name]; init {
				continue
			}
			dims := make([]int64, len(in.Dims))
			for i, d := range in.Dims {
				dims[i] = d
				if d < 0 || d > 64 {
					dims[i] = 1
				}
			}
			if !need[in.Name] {
				shapes[in.Name] = dims
				continue
			}
			n, err := numel(dims)
			if err != nil || n > 1<<16 {
				return
			}
			if in.DType == onnx.Float {
				consts[in.Name] = &onnx.Tensor{DType: onnx.Float, Dims: dims, F32: make([]float32, n)}
			} else {
				consts[in.Name] = &onnx.Tensor{DType: onnx.Int64, Dims: dims, I64: make([]int64, n)}
				if in.DType != onnx.Int64 {
					consts[in.Name].DType = in.DType
				}
			}
		}
		g, err := Compile(m, shapes, consts)
		if err != nil {
			return
		}
		checkComplete(t, g)
		_ = FLOPs(g)
	})
}
