package serving

// Usage inside a node (client/cmd_serve.go wires it; tests build the same by hand):
//
//	backend := serving.NewKernelBackend(threads)          // or NewFakeBackend() in tests
//	backend.LoadFile("lenet5", "/path/lenet5.onnx")
//	local := serving.NewLocalModels(backend, 30*time.Second)
//	local.Serve(serving.ServedModel{Name: "lenet5",
//		Batch: serving.BatchConfig{MaxBatch: 16, MaxDelay: 2 * time.Millisecond, MaxQueue: 256}})
//	srv := serving.NewServer(serving.Config{Node: "node0", Token: cfg.HTTPBearerToken()}, local) // "": open
//	srv.Remote = serving.NewRouter(rpcClient, peers, serving.Limits{}) // models served elsewhere
//	srv.Stats = &serving.RPCStats{Client: rpcClient, Addr: selfRPC}    // jobs for /metrics and /
//	serving.RegisterRPC(rpcServer, local, serving.Limits{})            // http.infer, http.models
//	go srv.Serve(listener)
//
// Layout: protocol.go and scan.go decode requests (limits first, then a one-pass JSON
// scanner; the binary tensor extension), dtype.go holds the protocol's datatypes and the
// conversions to a model's (FP16/BF16, integers, BYTES), body.go undoes Content-Encoding:
// gzip or deflate, encode.go writes responses, batch.go is the pure batching decision (time and
// priority passed in), runner.go drives it per model, local.go holds the served models and
// checks inputs against their metadata, route.go forwards to other nodes over rpc,
// config.go, tritonstats.go and repository.go are Triton's model configuration,
// statistics and model repository extensions, metrics.go is /metrics through
// prometheus/client_golang, dashboard.go/.html is the page, node.go is the node component
// (served models recorded and reloaded from SDFS; the repository), auth.go the optional
// bearer token.
//
// Triton and KServe clients work unchanged: GET /v2/models/{m}/config answers Triton's
// ModelConfig, /v2/models[/{m}]/stats its statistics, POST /v2/repository/index, .../load
// and .../unload map onto serve/unserve of idunno/models/NAME.onnx in SDFS; paths take
// /versions/1; the request parameters "timeout" (µs) and "priority" (1 first, levels up to
// PriorityLevels) are honoured; every datatype decodes, and inputs are converted to the
// model's datatype when no value changes (or FP64 is rounded into FP32), else 400; outputs
// keep the model's datatype. deploy/ has a Grafana dashboard and a Prometheus scrape config.
//
// Authentication: with Config.Token set (a node takes it from "http_token" in its config or
// IDUNNO_HTTP_TOKEN), every request must carry `Authorization: Bearer <token>`, compared in
// constant time; others get 401 with a JSON error and `WWW-Authenticate: Bearer`. The KServe
// health probes (/v2/health/live, /v2/health/ready) stay open for orchestrators. The
// dashboard page (GET / or /dashboard) also accepts ?token=, since a browser cannot add a
// header to the page load; its script reads the token from the URL and sends it as a
// header on its fetches, so no other endpoint accepts it in a URL. The token is kept only
// as a SHA-256 digest and never logged or echoed. Requests for a model served elsewhere
// are forwarded over the rpc (authenticated by the cluster secret), so the token is checked
// once, at the node the client asked. Empty token: the endpoint is open.
