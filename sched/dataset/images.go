package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // registers the JPEG decoder
	_ "image/png"  // registers the PNG decoder
	"sort"
)

// images is a folder of PNG/JPEG files, decoded on demand.
type images struct {
	names []string
	open  func(name string) ([]byte, error)
}

// OpenImages makes a dataset of PNG/JPEG files: sample i is the i-th name in byte order
// (the caller's order does not matter). open returns a file's bytes; it is called by Sample,
// once per call, so wrap it with a cache if samples are read more than once. Grey images
// (8- or 16-bit) have one channel, all others three (RGB, alpha dropped); 16-bit values are
// reduced to 8 bits.
func OpenImages(names []string, open func(name string) ([]byte, error)) (Dataset, error) {
	if len(names) == 0 {
		return nil, errors.New("dataset: images: no files")
	}
	if int64(len(names)) > MaxSamples {
		return nil, fmt.Errorf("dataset: images: %d files over the limit", len(names))
	}
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, fmt.Errorf("dataset: images: %s listed twice", sorted[i])
		}
	}
	return &images{names: sorted, open: open}, nil
}

func (d *images) Len() int { return len(d.names) }

// Name returns the file name of sample i.
func (d *images) Name(i int) string { return d.names[i] }

func (d *images) Sample(i int) (Image, error) {
	if i < 0 || i >= len(d.names) {
		return Image{}, fmt.Errorf("dataset: sample %d out of range [0,%d)", i, len(d.names))
	}
	name := d.names[i]
	b, err := d.open(name)
	if err != nil {
		return Image{}, fmt.Errorf("dataset: %s: %w", name, err)
	}
	im, err := DecodeImage(b)
	if err != nil {
		return Image{}, fmt.Errorf("dataset: %s: %w", name, unprefix(err))
	}
	return im, nil
}

// DecodeImage decodes one PNG or JPEG file into an 8-bit HWC Image (C = 1 for grey, else 3).
func DecodeImage(b []byte) (Image, error) {
	cfg, _, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return Image{}, fmt.Errorf("dataset: decode: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || int64(cfg.Width)*int64(cfg.Height) > MaxImagePixels {
		return Image{}, fmt.Errorf("dataset: image of %dx%d pixels refused (limit %d pixels)", cfg.Width, cfg.Height, MaxImagePixels)
	}
	src, _, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		return Image{}, fmt.Errorf("dataset: decode: %w", err)
	}
	return fromImage(src), nil
}

func fromImage(src image.Image) Image {
	r := src.Bounds()
	w, h := r.Dx(), r.Dy()
	switch s := src.(type) {
	case *image.Gray:
		out := Image{H: h, W: w, C: 1, U8: make([]uint8, w*h)}
		for y := 0; y < h; y++ {
			copy(out.U8[y*w:(y+1)*w], s.Pix[y*s.Stride:y*s.Stride+w])
		}
		return out
	case *image.Gray16:
		out := Image{H: h, W: w, C: 1, U8: make([]uint8, w*h)}
		for y := 0; y < h; y++ {
			row := s.Pix[y*s.Stride:]
			for x := 0; x < w; x++ {
				out.U8[y*w+x] = row[2*x] // high byte
			}
		}
		return out
	case *image.YCbCr:
		out := Image{H: h, W: w, C: 3, U8: make([]uint8, w*h*3)}
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				yi, ci := s.YOffset(r.Min.X+x, r.Min.Y+y), s.COffset(r.Min.X+x, r.Min.Y+y)
				R, G, B := color.YCbCrToRGB(s.Y[yi], s.Cb[ci], s.Cr[ci])
				k := 3 * (y*w + x)
				out.U8[k], out.U8[k+1], out.U8[k+2] = R, G, B
			}
		}
		return out
	case *image.NRGBA:
		out := Image{H: h, W: w, C: 3, U8: make([]uint8, w*h*3)}
		for y := 0; y < h; y++ {
			row := s.Pix[y*s.Stride:]
			for x := 0; x < w; x++ {
				k := 3 * (y*w + x)
				out.U8[k], out.U8[k+1], out.U8[k+2] = row[4*x], row[4*x+1], row[4*x+2]
			}
		}
		return out
	}
	grey := src.ColorModel() == color.GrayModel || src.ColorModel() == color.Gray16Model
	if grey {
		out := Image{H: h, W: w, C: 1, U8: make([]uint8, w*h)}
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				out.U8[y*w+x] = color.GrayModel.Convert(src.At(r.Min.X+x, r.Min.Y+y)).(color.Gray).Y
			}
		}
		return out
	}
	// Everything else (RGBA, paletted, CMYK, 16-bit colour) goes through non-premultiplied RGBA.
	out := Image{H: h, W: w, C: 3, U8: make([]uint8, w*h*3)}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.NRGBAModel.Convert(src.At(r.Min.X+x, r.Min.Y+y)).(color.NRGBA)
			k := 3 * (y*w + x)
			out.U8[k], out.U8[k+1], out.U8[k+2] = c.R, c.G, c.B
		}
	}
	return out
}
