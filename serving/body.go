package serving

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"

	"github.com/valyala/fasthttp"
)

var (
	errBodyTooLarge = errors.New("serving: body too large")
	errBadEncoding  = errors.New("serving: unsupported Content-Encoding")
)

// requestBody returns the request's body, decompressed when it came with
// Content-Encoding: gzip or deflate (Triton's clients compress with either).
func requestBody(ctx *fasthttp.RequestCtx, limit int) ([]byte, error) {
	return DecodeBody(ctx.Request.Header.ContentEncoding(), ctx.PostBody(), limit)
}

// DecodeBody undoes a Content-Encoding: none (or identity) returns body as it is, gzip
// (or x-gzip) and deflate decompress it, refusing to produce more than limit bytes (a
// small compressed body can inflate a thousandfold); anything else is errBadEncoding
// (415). deflate is HTTP's: a zlib stream (RFC 9110 8.4.1.2), which is what Triton's
// clients send (zlib.compress in tritonclient) and Triton's server reads.
func DecodeBody(encoding, body []byte, limit int) ([]byte, error) {
	var (
		zr   io.Reader
		name string
		err  error
	)
	switch {
	case len(encoding) == 0 || bytes.EqualFold(encoding, []byte("identity")):
		return body, nil
	case bytes.EqualFold(encoding, []byte("gzip")) || bytes.EqualFold(encoding, []byte("x-gzip")):
		name = "gzip"
		zr, err = gzip.NewReader(bytes.NewReader(body))
	case bytes.EqualFold(encoding, []byte("deflate")):
		name = "deflate"
		zr, err = zlib.NewReader(bytes.NewReader(body))
	default:
		return nil, fmt.Errorf("%w %q (gzip, deflate or none)", errBadEncoding, encoding)
	}
	if err != nil {
		return nil, badf("%s body: %v", name, err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, badf("%s body: %v", name, err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("%w: decompressed body exceeds the limit of %d bytes", errBodyTooLarge, limit)
	}
	return out, nil
}
