package serving

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// bearerAuth checks requests against the node's HTTP token. The zero value (no token)
// lets every request through.
type bearerAuth struct {
	digest *[sha256.Size]byte // SHA-256 of the token; nil: no authentication
}

func newBearerAuth(token string) bearerAuth {
	if token == "" {
		return bearerAuth{}
	}
	d := sha256.Sum256([]byte(token))
	return bearerAuth{digest: &d}
}

// matches compares a presented token with the configured one in constant time; hashing
// both first keeps the token's length out of the timing too.
func (a bearerAuth) matches(presented []byte) bool {
	d := sha256.Sum256(presented)
	return subtle.ConstantTimeCompare(d[:], a.digest[:]) == 1
}

// allow reports whether a request may go on, and if not, whether it carried a token at
// all. Health probes are always open (orchestrators probe without credentials); the
// dashboard page also takes the token as ?token=, because a browser cannot set a header
// on the page load itself (its script then sends the header on every fetch).
func (a bearerAuth) allow(ctx *fasthttp.RequestCtx, path string) (ok, presented bool) {
	if a.digest == nil || path == "/v2/health/live" || path == "/v2/health/ready" {
		return true, false
	}
	if tok, found := BearerToken(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)); found {
		return a.matches(tok), true
	}
	if (path == "/" || path == "/dashboard") && (ctx.IsGet() || ctx.IsHead()) && ctx.QueryArgs().Has("token") {
		return a.matches(ctx.QueryArgs().Peek("token")), true
	}
	return false, false
}

// BearerToken returns the token of an `Authorization: Bearer <token>` header value
// (scheme case-insensitive, RFC 6750) and whether the value had that form.
func BearerToken(header []byte) ([]byte, bool) {
	const scheme = "bearer "
	if len(header) <= len(scheme) || !bytes.EqualFold(header[:len(scheme)], []byte(scheme)) {
		return nil, false
	}
	tok := bytes.TrimLeft(header[len(scheme):], " ")
	if len(tok) == 0 {
		return nil, false
	}
	return tok, true
}

// writeUnauthorized answers a request that lacks the right token. The message never
// repeats what the client sent.
func writeUnauthorized(ctx *fasthttp.RequestCtx, presented bool) {
	msg, challenge := "serving: missing bearer token (send Authorization: Bearer <token>)", `Bearer realm="idunno"`
	if presented {
		msg, challenge = "serving: wrong bearer token", `Bearer realm="idunno", error="invalid_token"`
	}
	writeError(ctx, fasthttp.StatusUnauthorized, msg)
	ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, challenge)
}
