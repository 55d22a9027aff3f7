// Package dataset reads job data (IDX, .npy, a folder of PNG/JPEG files) and training labels,
// and turns a range of samples into the float32 NCHW tensor a model's input expects.
//
// # Reading
//
// A Dataset is a fixed, ordered list of images; sample i is query i of a job.
//
//	ds, err := dataset.Open(r)                  // IDX or .npy, gzip-compressed or not (sniffed)
//	ds, err := dataset.OpenBytes(b)             // the same from memory; raw uint8 data is not copied
//	ds, err := dataset.OpenIDX(r)               // idx3-ubyte images ([N,H,W]) or [N,H,W,C]
//	ds, err := dataset.OpenNPY(r)               // uint8/float32/float64, C order
//	ds, err := dataset.OpenImages(names, open)  // PNG/JPEG files, ordered by name
//	labels, err := dataset.ReadIDXLabels(r)     // idx1-ubyte labels
//
// WriteNPY and WriteIDX make such files (for tests and tools).
//
// IDX and .npy files are read whole into memory (at most MaxFileBytes after decompression);
// the header's declared size is checked against that limit and against the bytes actually
// present, and nothing is allocated from a header's say-so. OpenImages keeps only the names
// and decodes a file each time Sample asks for it (images over MaxImagePixels are refused
// before decoding). Detect tells the format from a file name and its first bytes.
//
// .npy shapes: [N,H,W] (grey), [N,H,W,C] (channels last, C <= 4) or [N,C,H,W] (channels
// first, C <= 4 and the last dimension > 4), and [N,F] read as N images of 1 x F. Fortran
// order, object arrays (pickles) and other element types are refused with an error.
//
// # Preprocessing and batching
//
// Preprocess says how samples become model input: optional bilinear Resize (half-pixel
// centres, like PyTorch's interpolate with align_corners=False), GreyToRGB (one channel
// copied to three), then per element v = (x*Scale - Mean[c]) / Std[c]. The zero value is
// the identity (Scale 0 means 1, empty Mean means 0, empty Std means 1). It has JSON tags
// so a job can carry it, and Flags registers the command-line flags:
//
//	--resize HxW   --grey-to-rgb   --mean a,b,c   --std a,b,c   --scale S
//
// Batch turns samples [from, to) into a tensor shaped for a model input:
//
//	t, err := dataset.Batch(ds, 0, 32, p, model.Graph.Inputs[0].Dims)
//	// t.DType == onnx.Float, t.Dims == [32, C, H, W], t.F32 in NCHW order
//
// The model's input dims may be [N,C,H,W], [N,H,W] (one channel) or [N,F] (flat, F = C*H*W
// in CHW order); the batch dimension is always set to to-from, and any other dimension that
// is not positive (symbolic) is taken from the data. When data and model do not fit (channel
// count without --grey-to-rgb, image size without a matching --resize, feature count) Batch
// returns an error that says which flag would fix it. Check runs the same test on sample 0,
// for validating a job before it starts.
//
// # Labels
//
// Training reads one class label per sample, as []int32:
//
//	labels, err := dataset.ReadLabels(name, r)                      // IDX idx1-ubyte or 1-D integer .npy, gzip or not
//	files, labels, classes, err := dataset.ImageFolderLabels(names) // CLASS/FILE names, like torchvision's ImageFolder
//	err = dataset.CheckLabels(labels, ds.Len(), 10)                 // one label per sample, each in [0, 10)
//
// .npy labels may be any integer type (int8 to int64, uint8 to uint64, either byte order)
// shaped [N] or [N,1]; floats, negative labels and labels over 2^31-1 are refused. For a
// folder of images, classes are the sub-folder names in byte order and a label is its
// class's index (torchvision's class_to_idx); files come in OpenImages' order (byte order
// of the names), so labels[i] belongs to sample i of the folder dataset made from the same
// names, with or without the folder's prefix in front. torchvision orders samples by class
// first, which differs only when a class name is a prefix of another followed by a byte
// below '/' ("cat", "cat-big"); each file's label is the same either way.
//
// Batch is deterministic: the same bytes and settings give bit-identical tensors, on every
// run and every node running the same binary (no parallelism, no fused multiply-add).
// Errors start with "dataset: ".
package dataset
