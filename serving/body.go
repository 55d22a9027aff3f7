package serving

import (
	"bytes"
	"compress/gzip"
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
// Content-Encoding: gzip (Triton's clients compress with it).
func requestBody(ctx *fasthttp.RequestCtx, limit int) ([]byte, error) {
	return DecodeBody(ctx.Request.Header.ContentEncoding(), ctx.PostBody(), limit)
}

// DecodeBody undoes a Content-Encoding: none (or identity) returns body as it is, gzip
// decompresses it, refusing to produce more than limit bytes (a small gzip body can
// inflate a thousandfold); anything else is errBadEncoding (415).
func DecodeBody(encoding, body []byte, limit int) ([]byte, error) {
	switch {
	case len(encoding) == 0 || bytes.EqualFold(encoding, []byte("identity")):
		return body, nil
	case !bytes.EqualFold(encoding, []byte("gzip")) && !bytes.EqualFold(encoding, []byte("x-gzip")):
		return nil, fmt.Errorf("%w %q (gzip or none)", errBadEncoding, encoding)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, badf("gzip body: %v", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, badf("gzip body: %v", err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("%w: decompressed body exceeds the limit of %d bytes", errBodyTooLarge, limit)
	}
	return out, nil
}
