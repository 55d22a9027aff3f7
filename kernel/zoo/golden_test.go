package zoo

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"idunno/kernel/onnx"
)

type goldenKey struct {
	name    string
	seed    uint64
	classes int64
}

// goldenDefault are the SHA-256 digests of onnx.Encode(Build(name, Options{Seed, Classes}))
// as the zoo wrote them before Options.Init existed (commit 1666062). The default weights
// must keep these bytes: tests, the demo and the benchmarks depend on them, and models
// already stored in clusters were written with them.
var goldenDefault = map[goldenKey]string{
	{"alexnet", 1, 0}:       "de63a1f1c1a8ba1bc0302a0ea514116e4c5da23a2fe5b05256076114dd803427",
	{"inception_v3", 1, 0}:  "9e6748f6f6c814dd82a8443c600fe98196f1d75e8b49b7275367b2623a54d908",
	{"inception_v3", 7, 10}: "cf79ad7bb0a3a5af2d0aa499720b9507ebc80530d7165c54d1e9638864a3e33c",
	{"lenet5", 1, 0}:        "64231c6b54dc5a97f6699a9e801a9a78939ea756fb3e94443a4845e3daf94840",
	{"lenet5", 7, 10}:       "dc01f669e7b089ff05a5ad8d3fb40088732a16df99454505307fc00dd709c5af",
	{"mobilenet_v2", 1, 0}:  "13ce7ce1014b335608b982c511e40684b93299ad6962f25da6ae31d22f1e3dd4",
	{"mobilenet_v2", 7, 10}: "ca67a58296e1e5e0efe7382039ab470d749c143c584c9a378d525384448c9c66",
	{"resnet18", 1, 0}:      "d96f1599c3d6ce03326208437733392785cd4639723ef4439e487b640171a78c",
	{"resnet18", 7, 10}:     "7bc6d9eb5b8253da6c0bcc3ffc7b22150cca7e117ccdfa872d0c70222a314297",
	{"resnet50", 1, 0}:      "822e04fd684f4ea4c589a8ff3c1074959f3ac261e6a2954a4e361ff4715b4ba3",
	{"resnet50", 7, 10}:     "a794bc03987e146f1541eb654de2cb11905ae950f22c9b7dc69691ee13005619",
	{"squeezenet", 1, 0}:    "e5e6521297120e3004604646bd22c2cf87c4970984f8e90ce98987b3eda2732a",
	{"squeezenet", 7, 10}:   "3f9474710f778dfae2f1a5ddeb85dc52ee926336ad06d33aa2515cd5e998b587",
	{"vgg16", 1, 0}:         "401625dc56407892d905c00007936feff4441c58484ecd09f1c8c20f3896b24a",
}

func TestDefaultInitUnchanged(t *testing.T) {
	for _, name := range Names() {
		keys := []goldenKey{{name, 1, 0}, {name, 7, 10}}
		if name == "alexnet" || name == "vgg16" { // a quarter and half a gigabyte: one is enough
			keys = keys[:1]
		}
		for _, key := range keys {
			want, ok := goldenDefault[key]
			if !ok {
				t.Fatalf("no golden digest for %+v", key)
			}
			m, err := Build(name, Options{Seed: key.seed, Classes: key.classes})
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(onnx.Encode(m))
			if got := hex.EncodeToString(sum[:]); got != want {
				t.Errorf("%+v: the default weights changed: sha256 %s, was %s", key, got, want)
			}
		}
	}
}
