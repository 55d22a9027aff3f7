package zoo

import "fmt"

// Each architecture follows its torchvision definition (layer for layer, same
// initializer names as the state_dict keys). Dropout is left out of the inference weights
// and written as a Dropout node, where torchvision has one, under Init "torch".

func lenet5(b *builder, x value, classes int64) value {
	x = b.relu(b.conv(x, "conv1", k(5).outC(6).pad(2).withBias()))
	x = b.pool("MaxPool", x, 2, 2, 0, false)
	x = b.relu(b.conv(x, "conv2", k(5).outC(16).withBias()))
	x = b.pool("MaxPool", x, 2, 2, 0, false)
	x = b.flatten(x)
	x = b.relu(b.linear(x, "fc1", 120, true))
	x = b.relu(b.linear(x, "fc2", 84, true))
	return b.linear(x, "fc3", classes, false)
}

// convBN is Conv (no bias) + BatchNormalization, the pattern exporters write before folding.
func (b *builder) convBN(x value, prefix, bnPrefix string, s convSpec, eps float32, gain float64) value {
	return b.bn(b.conv(x, prefix, s), bnPrefix, eps, gain)
}

// residualGain scales the last BatchNormalization of each residual branch so that the
// sum of many branches keeps activations O(1).
const residualGain = 0.3

func resnet(blocks [4]int, bottleneck bool) func(b *builder, x value, classes int64) value {
	return func(b *builder, x value, classes int64) value {
		x = b.relu(b.convBN(x, "conv1", "bn1", k(7).outC(64).stride(2).pad(3), 1e-5, 1))
		x = b.pool("MaxPool", x, 3, 2, 1, false)
		expansion := int64(1)
		if bottleneck {
			expansion = 4
		}
		for li, n := range blocks {
			planes := int64(64) << li
			for bi := 0; bi < n; bi++ {
				stride := int64(1)
				if bi == 0 && li > 0 {
					stride = 2
				}
				p := fmt.Sprintf("layer%d.%d", li+1, bi)
				shortcut := x
				if stride != 1 || x.c != planes*expansion {
					shortcut = b.convBN(x, p+".downsample.0", p+".downsample.1",
						k(1).outC(planes*expansion).stride(stride), 1e-5, 1)
				}
				var y value
				if bottleneck {
					y = b.relu(b.convBN(x, p+".conv1", p+".bn1", k(1).outC(planes), 1e-5, 1))
					y = b.relu(b.convBN(y, p+".conv2", p+".bn2", k(3).outC(planes).stride(stride).pad(1), 1e-5, 1))
					y = b.convBN(y, p+".conv3", p+".bn3", k(1).outC(planes*4), 1e-5, residualGain)
				} else {
					y = b.relu(b.convBN(x, p+".conv1", p+".bn1", k(3).outC(planes).stride(stride).pad(1), 1e-5, 1))
					y = b.convBN(y, p+".conv2", p+".bn2", k(3).outC(planes).pad(1), 1e-5, residualGain)
				}
				x = b.relu(b.add(y, shortcut))
			}
		}
		x = b.flatten(b.globalAvg(x))
		return b.linear(x, "fc", classes, false)
	}
}

func alexnet(b *builder, x value, classes int64) value {
	x = b.relu(b.conv(x, "features.0", k(11).outC(64).stride(4).pad(2).withBias()))
	x = b.pool("MaxPool", x, 3, 2, 0, false)
	x = b.relu(b.conv(x, "features.3", k(5).outC(192).pad(2).withBias()))
	x = b.pool("MaxPool", x, 3, 2, 0, false)
	x = b.relu(b.conv(x, "features.6", k(3).outC(384).pad(1).withBias()))
	x = b.relu(b.conv(x, "features.8", k(3).outC(256).pad(1).withBias()))
	x = b.relu(b.conv(x, "features.10", k(3).outC(256).pad(1).withBias()))
	x = b.pool("MaxPool", x, 3, 2, 0, false)
	x = b.flatten(b.adaptiveAvg(x, 6))
	x = b.relu(b.linear(b.dropout(x, "classifier.0", 0.5), "classifier.1", 4096, true))
	x = b.relu(b.linear(b.dropout(x, "classifier.3", 0.5), "classifier.4", 4096, true))
	return b.linear(x, "classifier.6", classes, false)
}

func vgg16(b *builder, x value, classes int64) value {
	cfg := []int64{64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0}
	i := 0
	for _, c := range cfg {
		if c == 0 {
			x = b.pool("MaxPool", x, 2, 2, 0, false)
			i++
			continue
		}
		x = b.relu(b.conv(x, fmt.Sprintf("features.%d", i), k(3).outC(c).pad(1).withBias()))
		i += 2
	}
	x = b.flatten(b.adaptiveAvg(x, 7))
	x = b.dropout(b.relu(b.linear(x, "classifier.0", 4096, true)), "classifier.2", 0.5)
	x = b.dropout(b.relu(b.linear(x, "classifier.3", 4096, true)), "classifier.5", 0.5)
	return b.linear(x, "classifier.6", classes, false)
}

func mobilenetV2(b *builder, x value, classes int64) value {
	x = b.relu6(b.convBN(x, "features.0.0", "features.0.1", k(3).outC(32).stride(2).pad(1), 1e-5, 1))
	settings := [][4]int64{{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}}
	idx := 1
	for _, s := range settings {
		t, c, n, stride := s[0], s[1], s[2], s[3]
		for i := int64(0); i < n; i++ {
			st := int64(1)
			if i == 0 {
				st = stride
			}
			p := fmt.Sprintf("features.%d.conv", idx)
			hidden := x.c * t
			y := x
			j := 0
			if t != 1 {
				y = b.relu6(b.convBN(y, p+".0.0", p+".0.1", k(1).outC(hidden), 1e-5, 1))
				j = 1
			}
			y = b.relu6(b.convBN(y, fmt.Sprintf("%s.%d.0", p, j), fmt.Sprintf("%s.%d.1", p, j),
				k(3).outC(hidden).stride(st).pad(1).group(hidden), 1e-5, 1))
			gain := 1.0
			if st == 1 && x.c == c {
				gain = residualGain
			}
			y = b.convBN(y, fmt.Sprintf("%s.%d", p, j+1), fmt.Sprintf("%s.%d", p, j+2), k(1).outC(c), 1e-5, gain)
			if st == 1 && x.c == c {
				y = b.add(x, y)
			}
			x = y
			idx++
		}
	}
	x = b.relu6(b.convBN(x, "features.18.0", "features.18.1", k(1).outC(1280), 1e-5, 1))
	x = b.flatten(b.globalAvg(x))
	return b.linear(b.dropout(x, "classifier.0", 0.2), "classifier.1", classes, false)
}

func squeezenet(b *builder, x value, classes int64) value {
	fire := func(x value, idx int, squeeze, e1, e3 int64) value {
		p := fmt.Sprintf("features.%d", idx)
		s := b.relu(b.conv(x, p+".squeeze", k(1).outC(squeeze).withBias()))
		return b.concat(b.relu(b.conv(s, p+".expand1x1", k(1).outC(e1).withBias())),
			b.relu(b.conv(s, p+".expand3x3", k(3).outC(e3).pad(1).withBias())))
	}
	x = b.relu(b.conv(x, "features.0", k(7).outC(96).stride(2).withBias()))
	x = b.pool("MaxPool", x, 3, 2, 0, true)
	x = fire(x, 3, 16, 64, 64)
	x = fire(x, 4, 16, 64, 64)
	x = fire(x, 5, 32, 128, 128)
	x = b.pool("MaxPool", x, 3, 2, 0, true)
	x = fire(x, 7, 32, 128, 128)
	x = fire(x, 8, 48, 192, 192)
	x = fire(x, 9, 48, 192, 192)
	x = fire(x, 10, 64, 256, 256)
	x = b.pool("MaxPool", x, 3, 2, 0, true)
	x = fire(x, 12, 64, 256, 256)
	x = b.relu(b.conv(b.dropout(x, "classifier.0", 0.5), "classifier.1", k(1).outC(classes).withBias()))
	return b.flatten(b.globalAvg(x))
}

// basicConv is inception's BasicConv2d: Conv (no bias) + BatchNormalization(eps 1e-3) + ReLU.
func (b *builder) basicConv(x value, prefix string, s convSpec) value {
	return b.relu(b.convBN(x, prefix+".conv", prefix+".bn", s, 1e-3, 1))
}

func inceptionV3(b *builder, x value, classes int64) value {
	x = b.basicConv(x, "Conv2d_1a_3x3", k(3).outC(32).stride(2))
	x = b.basicConv(x, "Conv2d_2a_3x3", k(3).outC(32))
	x = b.basicConv(x, "Conv2d_2b_3x3", k(3).outC(64).pad(1))
	x = b.pool("MaxPool", x, 3, 2, 0, false)
	x = b.basicConv(x, "Conv2d_3b_1x1", k(1).outC(80))
	x = b.basicConv(x, "Conv2d_4a_3x3", k(3).outC(192))
	x = b.pool("MaxPool", x, 3, 2, 0, false)
	x = b.inceptionA(x, "Mixed_5b", 32)
	x = b.inceptionA(x, "Mixed_5c", 64)
	x = b.inceptionA(x, "Mixed_5d", 64)
	x = b.inceptionB(x, "Mixed_6a")
	x = b.inceptionC(x, "Mixed_6b", 128)
	x = b.inceptionC(x, "Mixed_6c", 160)
	x = b.inceptionC(x, "Mixed_6d", 160)
	x = b.inceptionC(x, "Mixed_6e", 192)
	x = b.inceptionD(x, "Mixed_7a")
	x = b.inceptionE(x, "Mixed_7b")
	x = b.inceptionE(x, "Mixed_7c")
	x = b.flatten(b.dropout(b.globalAvg(x), "dropout", 0.5))
	return b.linear(x, "fc", classes, false)
}

func (b *builder) inceptionA(x value, p string, poolFeatures int64) value {
	b1 := b.basicConv(x, p+".branch1x1", k(1).outC(64))
	b5 := b.basicConv(x, p+".branch5x5_1", k(1).outC(48))
	b5 = b.basicConv(b5, p+".branch5x5_2", k(5).outC(64).pad(2))
	b3 := b.basicConv(x, p+".branch3x3dbl_1", k(1).outC(64))
	b3 = b.basicConv(b3, p+".branch3x3dbl_2", k(3).outC(96).pad(1))
	b3 = b.basicConv(b3, p+".branch3x3dbl_3", k(3).outC(96).pad(1))
	bp := b.basicConv(b.pool("AveragePool", x, 3, 1, 1, false), p+".branch_pool", k(1).outC(poolFeatures))
	return b.concat(b1, b5, b3, bp)
}

func (b *builder) inceptionB(x value, p string) value {
	b3 := b.basicConv(x, p+".branch3x3", k(3).outC(384).stride(2))
	bd := b.basicConv(x, p+".branch3x3dbl_1", k(1).outC(64))
	bd = b.basicConv(bd, p+".branch3x3dbl_2", k(3).outC(96).pad(1))
	bd = b.basicConv(bd, p+".branch3x3dbl_3", k(3).outC(96).stride(2))
	bp := b.pool("MaxPool", x, 3, 2, 0, false)
	return b.concat(b3, bd, bp)
}

func (b *builder) inceptionC(x value, p string, c7 int64) value {
	b1 := b.basicConv(x, p+".branch1x1", k(1).outC(192))
	b7 := b.basicConv(x, p+".branch7x7_1", k(1).outC(c7))
	b7 = b.basicConv(b7, p+".branch7x7_2", kk(1, 7).outC(c7).pad2(0, 3))
	b7 = b.basicConv(b7, p+".branch7x7_3", kk(7, 1).outC(192).pad2(3, 0))
	bd := b.basicConv(x, p+".branch7x7dbl_1", k(1).outC(c7))
	bd = b.basicConv(bd, p+".branch7x7dbl_2", kk(7, 1).outC(c7).pad2(3, 0))
	bd = b.basicConv(bd, p+".branch7x7dbl_3", kk(1, 7).outC(c7).pad2(0, 3))
	bd = b.basicConv(bd, p+".branch7x7dbl_4", kk(7, 1).outC(c7).pad2(3, 0))
	bd = b.basicConv(bd, p+".branch7x7dbl_5", kk(1, 7).outC(192).pad2(0, 3))
	bp := b.basicConv(b.pool("AveragePool", x, 3, 1, 1, false), p+".branch_pool", k(1).outC(192))
	return b.concat(b1, b7, bd, bp)
}

func (b *builder) inceptionD(x value, p string) value {
	b3 := b.basicConv(x, p+".branch3x3_1", k(1).outC(192))
	b3 = b.basicConv(b3, p+".branch3x3_2", k(3).outC(320).stride(2))
	b7 := b.basicConv(x, p+".branch7x7x3_1", k(1).outC(192))
	b7 = b.basicConv(b7, p+".branch7x7x3_2", kk(1, 7).outC(192).pad2(0, 3))
	b7 = b.basicConv(b7, p+".branch7x7x3_3", kk(7, 1).outC(192).pad2(3, 0))
	b7 = b.basicConv(b7, p+".branch7x7x3_4", k(3).outC(192).stride(2))
	bp := b.pool("MaxPool", x, 3, 2, 0, false)
	return b.concat(b3, b7, bp)
}

func (b *builder) inceptionE(x value, p string) value {
	b1 := b.basicConv(x, p+".branch1x1", k(1).outC(320))
	b3 := b.basicConv(x, p+".branch3x3_1", k(1).outC(384))
	b3 = b.concat(b.basicConv(b3, p+".branch3x3_2a", kk(1, 3).outC(384).pad2(0, 1)),
		b.basicConv(b3, p+".branch3x3_2b", kk(3, 1).outC(384).pad2(1, 0)))
	bd := b.basicConv(x, p+".branch3x3dbl_1", k(1).outC(448))
	bd = b.basicConv(bd, p+".branch3x3dbl_2", k(3).outC(384).pad(1))
	bd = b.concat(b.basicConv(bd, p+".branch3x3dbl_3a", kk(1, 3).outC(384).pad2(0, 1)),
		b.basicConv(bd, p+".branch3x3dbl_3b", kk(3, 1).outC(384).pad2(1, 0)))
	bp := b.basicConv(b.pool("AveragePool", x, 3, 1, 1, false), p+".branch_pool", k(1).outC(192))
	return b.concat(b1, b3, bd, bp)
}
