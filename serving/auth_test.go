package serving

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"idunno/rpc"
)

const testToken = "s3cret-token-for-tests"

func bearerHdr(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

// wantUnauthorized checks a 401 with the JSON error body and the Bearer challenge.
func wantUnauthorized(t *testing.T, what string, code int, hdr map[string][]string, b []byte, msg string) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if code != 401 || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, msg) ||
		len(hdr["Www-Authenticate"]) != 1 || !strings.HasPrefix(hdr["Www-Authenticate"][0], "Bearer ") {
		t.Fatalf("%s: %d %v %s, want 401 %q with a Bearer challenge", what, code, hdr, b, msg)
	}
	if strings.Contains(string(b), "wrong-") {
		t.Fatalf("%s: the answer repeats the presented token: %s", what, b)
	}
}

func TestNoTokenConfiguredIsOpen(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	for _, u := range []string{"/v2", "/v2/models/double", "/metrics", "/", "/api/dashboard"} {
		if code, _, b := do(t, "GET", ts.url+u, nil, nil); code != 200 {
			t.Fatalf("GET %s without a token on an open node: %d %s", u, code, b)
		}
	}
	if code, _, b := infer(t, ts.url, "double", doubleReq); code != 200 {
		t.Fatalf("infer on an open node: %d %s", code, b)
	}
}

func TestTokenRequiredOnEveryEndpointButHealth(t *testing.T) {
	ts := startServer(t, Config{Token: testToken}, BatchConfig{})
	cases := []struct{ method, path, body string }{
		{"GET", "/v2", ""},
		{"GET", "/v2/models/double", ""},
		{"GET", "/v2/models/double/ready", ""},
		{"POST", "/v2/models/double/infer", doubleReq},
		{"GET", "/metrics", ""},
		{"GET", "/api/dashboard", ""},
		{"GET", "/", ""},
		{"GET", "/nothing", ""}, // no probing for endpoints either
	}
	for _, c := range cases {
		code, hdr, b := do(t, c.method, ts.url+c.path, []byte(c.body), nil)
		wantUnauthorized(t, c.method+" "+c.path+" without a token", code, hdr, b, "missing bearer token")
		code, hdr, b = do(t, c.method, ts.url+c.path, []byte(c.body), bearerHdr("wrong-"+testToken))
		wantUnauthorized(t, c.method+" "+c.path+" with a wrong token", code, hdr, b, "wrong bearer token")
		code, hdr, b = do(t, c.method, ts.url+c.path, []byte(c.body), map[string]string{"Authorization": "Basic " + testToken})
		wantUnauthorized(t, c.method+" "+c.path+" with another scheme", code, hdr, b, "missing bearer token")
		code, _, b = do(t, c.method, ts.url+c.path, []byte(c.body), map[string]string{"Authorization": "bearer " + testToken})
		if want := map[bool]int{true: 404, false: 200}[c.path == "/nothing"]; code != want {
			t.Fatalf("%s %s with the token: %d %s, want %d", c.method, c.path, code, b, want)
		}
	}
	// Rejected requests never reach a model.
	if n := len(ts.fake.CallRows()); n != 1 {
		t.Fatalf("the model ran %d times, want once (the authenticated request)", n)
	}
	code, _, b := do(t, "POST", ts.url+"/v2/models/double/infer", []byte(doubleReq), bearerHdr(testToken))
	var r inferResp
	if code != 200 || json.Unmarshal(b, &r) != nil || fmt.Sprint(r.Outputs[0].Data) != "[2 4 6 8]" {
		t.Fatalf("infer with the token: %d %s", code, b)
	}
	code, _, b = do(t, "GET", ts.url+"/metrics", nil, bearerHdr(testToken))
	if code != 200 || !strings.Contains(string(b), `idunno_http_requests_total{code="200",model="double"} 2`) {
		t.Fatalf("metrics with the token: %d\n%s", code, b)
	}
	// Health probes stay open, with or without a (even wrong) token.
	for _, p := range []string{"/v2/health/live", "/v2/health/ready"} {
		for _, h := range []map[string]string{nil, bearerHdr("wrong-" + testToken)} {
			if code, _, b := do(t, "GET", ts.url+p, nil, h); code != 200 {
				t.Fatalf("GET %s (%v): %d %s", p, h, code, b)
			}
		}
	}
}

func TestDashboardTakesTheTokenInItsURL(t *testing.T) {
	ts := startServer(t, Config{Node: "n1", Token: testToken}, BatchConfig{})
	for _, p := range []string{"/", "/dashboard"} {
		code, hdr, b := do(t, "GET", ts.url+p+"?token="+testToken, nil, nil)
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") || hdr.Get("Referrer-Policy") != "no-referrer" {
			t.Fatalf("dashboard page with ?token=: %d %v", code, hdr)
		}
		if !strings.Contains(string(b), `"Authorization": "Bearer " + token`) {
			t.Fatal("the page's script does not send the token on its fetches")
		}
		code, hdr, b = do(t, "GET", ts.url+p, nil, nil)
		wantUnauthorized(t, p+" without a token", code, hdr, b, "missing bearer token")
		code, hdr, b = do(t, "GET", ts.url+p+"?token=wrong-x", nil, nil)
		wantUnauthorized(t, p+" with a wrong ?token=", code, hdr, b, "wrong bearer token")
	}
	// The query parameter opens the page only: data and inference need the header.
	for _, p := range []string{"/api/dashboard", "/metrics", "/v2/models/double"} {
		code, hdr, b := do(t, "GET", ts.url+p+"?token="+testToken, nil, nil)
		wantUnauthorized(t, p+" with ?token=", code, hdr, b, "missing bearer token")
	}
	code, hdr, b := do(t, "POST", ts.url+"/v2/models/double/infer?token="+testToken, []byte(doubleReq), nil)
	wantUnauthorized(t, "infer with ?token=", code, hdr, b, "missing bearer token")
	var d DashboardData
	code, _, b = do(t, "GET", ts.url+"/api/dashboard", nil, bearerHdr(testToken))
	if code != 200 || json.Unmarshal(b, &d) != nil || d.Node != "n1" {
		t.Fatalf("dashboard data with the header: %d %s", code, b)
	}
}

// Forwarding to the serving node goes over the internal rpc (authenticated by the cluster
// secret), so the token is checked once, where the request enters the cluster.
func TestForwardingBetweenNodesWithAToken(t *testing.T) {
	b := startRPCNode(t, "nodeB", map[string]BatchConfig{"double": {}})
	urlB := serveHTTP(t, NewServer(Config{Node: "nodeB", Token: testToken}, b.local))
	client := rpc.NewClient([]byte(testSecret))
	t.Cleanup(client.Close)
	local := NewLocalModels(NewFakeBackend(), time.Second)
	t.Cleanup(local.Close)
	front := NewServer(Config{Node: "nodeA", Token: testToken}, local)
	front.Remote = NewRouter(client, StaticPeers{b.peer}, Limits{})
	urlA := serveHTTP(t, front)

	for _, u := range []string{urlA, urlB} {
		code, _, body := do(t, "POST", u+"/v2/models/double/infer", []byte(doubleReq), bearerHdr(testToken))
		var r inferResp
		if code != 200 || json.Unmarshal(body, &r) != nil || fmt.Sprint(r.Outputs[0].Data) != "[2 4 6 8]" {
			t.Fatalf("infer at %s with the token: %d %s", u, code, body)
		}
	}
	if n := len(b.fake.CallRows()); n != 2 {
		t.Fatalf("nodeB ran %d requests, want 2 (one its own, one forwarded by nodeA)", n)
	}
	code, hdr, body := do(t, "POST", urlA+"/v2/models/double/infer", []byte(doubleReq), nil)
	wantUnauthorized(t, "infer at nodeA without a token", code, hdr, body, "missing bearer token")
	code, hdr, body = do(t, "GET", urlA+"/v2/models/double", nil, bearerHdr("wrong-"+testToken))
	wantUnauthorized(t, "routed metadata with a wrong token", code, hdr, body, "wrong bearer token")
	if n := len(b.fake.CallRows()); n != 2 {
		t.Fatalf("a rejected request was forwarded: nodeB ran %d", n)
	}
}

func TestBearerToken(t *testing.T) {
	for _, c := range []struct {
		in, tok string
		ok      bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER   abc", "abc", true},
		{"Bearer ", "", false},
		{"Bearer", "", false},
		{"Basic abc", "", false},
		{"Bearerabc", "", false},
		{"", "", false},
	} {
		tok, ok := BearerToken([]byte(c.in))
		if ok != c.ok || string(tok) != c.tok {
			t.Errorf("BearerToken(%q) = %q %v, want %q %v", c.in, tok, ok, c.tok, c.ok)
		}
	}
}

func TestTokenComparison(t *testing.T) {
	a := newBearerAuth(testToken)
	for _, c := range []struct {
		tok string
		ok  bool
	}{{testToken, true}, {testToken + "x", false}, {testToken[:5], false}, {"", false}} {
		if a.matches([]byte(c.tok)) != c.ok {
			t.Errorf("matches(%q) != %v", c.tok, c.ok)
		}
	}
}
