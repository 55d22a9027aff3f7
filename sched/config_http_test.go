package sched

import "testing"

func TestHTTPBearerTokenFromConfigElseEnv(t *testing.T) {
	t.Setenv("IDUNNO_HTTP_TOKEN", "")
	if tok := (NodeConfig{}).HTTPBearerToken(); tok != "" {
		t.Fatalf("no token anywhere: %q, want \"\" (open endpoint)", tok)
	}
	t.Setenv("IDUNNO_HTTP_TOKEN", "from-env")
	if tok := (NodeConfig{}).HTTPBearerToken(); tok != "from-env" {
		t.Fatalf("token %q, want the environment's", tok)
	}
	if tok := (NodeConfig{HTTPToken: "from-config"}).HTTPBearerToken(); tok != "from-config" {
		t.Fatalf("token %q, want the config's", tok)
	}
}
