package onnx

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// External data: a TensorProto with data_location = EXTERNAL keeps its bytes in another
// file beside the model (how models over protobuf's 2 GiB limit are saved). Its
// external_data entries name the file (location, relative to the model's folder), the
// byte offset and the length. ReadFile reads them; Decode, which has no folder, rejects
// such models. The file must stay inside the model's folder (os.Root confines the path,
// symbolic links included), and offset and length must lie inside it and match the
// tensor's declared type and shape.

// externalRef is a tensor's external_data, checked for form but not yet read.
type externalRef struct {
	location       string
	offset, length int64 // length -1: to the end of the file
}

// MaxExternalEntries bounds a tensor's external_data entries.
const MaxExternalEntries = 16

// ErrExternalData is returned (wrapped) by Decode and DecodeTensor for a tensor whose
// data is in another file: only ReadFile, which knows the model's folder, reads those.
var ErrExternalData = errors.New("external data needs the model's folder (read the model with ReadFile)")

// decodeExternalEntry parses one StringStringEntryProto (key = 1, value = 2).
func decodeExternalEntry(b []byte) (key, value string, err error) {
	err = eachField(b, func(f field) error {
		switch f.num {
		case 1:
			if err := f.wantBytes("key"); err != nil {
				return err
			}
			key = string(f.v)
		case 2:
			if err := f.wantBytes("value"); err != nil {
				return err
			}
			value = string(f.v)
		}
		return nil
	})
	return key, value, err
}

// parseExternal checks the gathered external_data entries.
func parseExternal(entries [][2]string) (*externalRef, error) {
	if len(entries) > MaxExternalEntries {
		return nil, fmt.Errorf("external data has %d entries, over the limit of %d", len(entries), MaxExternalEntries)
	}
	ref := &externalRef{length: -1}
	seen := map[string]bool{}
	for _, e := range entries {
		k, v := e[0], e[1]
		if seen[k] {
			return nil, fmt.Errorf("external data: key %q given twice", k)
		}
		seen[k] = true
		switch k {
		case "location":
			ref.location = v
		case "offset", "length":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("external data: %s %q is not a non-negative integer", k, v)
			}
			if k == "offset" {
				ref.offset = n
			} else {
				ref.length = n
			}
		case "checksum":
			// optional SHA-1; the bounds and size checks below are what guard the reader
		default:
			return nil, fmt.Errorf("external data: unknown key %q", k)
		}
	}
	if ref.location == "" {
		return nil, fmt.Errorf("external data: no location")
	}
	if !filepath.IsLocal(ref.location) {
		return nil, fmt.Errorf("external data: location %q is not a relative path inside the model's folder", ref.location)
	}
	return ref, nil
}

// walkTensors calls fn for every tensor of g: initializers, and tensor attributes of
// nodes (subgraphs included).
func walkTensors(g *Graph, fn func(t *Tensor) error) error {
	if g == nil {
		return nil
	}
	for _, t := range g.Initializers {
		if t != nil {
			if err := fn(t); err != nil {
				return err
			}
		}
	}
	for _, n := range g.Nodes {
		if n == nil {
			continue
		}
		for _, a := range n.Attrs {
			if a == nil {
				continue
			}
			if a.T != nil {
				if err := fn(a.T); err != nil {
					return err
				}
			}
			for _, t := range a.Tensors {
				if t != nil {
					if err := fn(t); err != nil {
						return err
					}
				}
			}
			if err := walkTensors(a.G, fn); err != nil {
				return err
			}
			for _, sg := range a.Graphs {
				if err := walkTensors(sg, fn); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// rejectExternal fails when any tensor of m keeps its data in another file.
func rejectExternal(m *Model) error {
	return walkTensors(m.Graph, func(t *Tensor) error {
		if t.ext != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, ErrExternalData)
		}
		return nil
	})
}

// resolveExternal reads every external tensor of m from files inside dir.
func resolveExternal(m *Model, dir string) error {
	var root *os.Root
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
		if root != nil {
			root.Close()
		}
	}()
	return walkTensors(m.Graph, func(t *Tensor) error {
		ref := t.ext
		if ref == nil {
			return nil
		}
		if root == nil {
			r, err := os.OpenRoot(dir)
			if err != nil {
				return fmt.Errorf("tensor %q: external data: %w", t.Name, err)
			}
			root = r
		}
		f, ok := files[ref.location]
		if !ok {
			var err error
			if f, err = root.Open(ref.location); err != nil {
				return fmt.Errorf("tensor %q: external data: %w", t.Name, err)
			}
			files[ref.location] = f
		}
		if err := readExternal(t, f); err != nil {
			return fmt.Errorf("tensor %q: external data in %s: %w", t.Name, ref.location, err)
		}
		return nil
	})
}

// readExternal reads t's bytes from f and fills t as raw_data would.
func readExternal(t *Tensor, f *os.File) error {
	ref := t.ext
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("not a regular file")
	}
	n, err := NumElements(t.Dims)
	if err != nil {
		return err
	}
	sz := int64(ElemSize(t.DType))
	if sz == 0 {
		return fmt.Errorf("data type %v cannot be stored externally", t.DType)
	}
	want := n * sz
	length := ref.length
	if length < 0 {
		length = st.Size() - ref.offset
	}
	if length != want {
		return fmt.Errorf("length %d bytes; shape %v of %v needs %d", length, t.Dims, t.DType, want)
	}
	if ref.offset > st.Size() || want > st.Size()-ref.offset {
		return fmt.Errorf("offset %d + length %d is past the end of the %d-byte file", ref.offset, want, st.Size())
	}
	raw := make([]byte, want)
	if _, err := f.ReadAt(raw, ref.offset); err != nil && !(errors.Is(err, io.EOF) && want == 0) {
		return err
	}
	tf := tensorFields{t: Tensor{Name: t.Name, DType: t.DType, Dims: t.Dims}, raw: raw, hasRaw: true}
	if err := tf.fromRaw(int(n)); err != nil {
		return err
	}
	*t = tf.t
	return nil
}
