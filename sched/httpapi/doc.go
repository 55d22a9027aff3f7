package httpapi

// Usage inside a node (client/cmd_serve.go wires it; tests build the same by hand):
//
//	backend := httpapi.NewKernelBackend(threads)          // or NewFakeBackend() in tests
//	backend.LoadFile("lenet5", "/path/lenet5.onnx")
//	local := httpapi.NewLocalModels(backend, 30*time.Second)
//	local.Serve(httpapi.ServedModel{Name: "lenet5",
//		Batch: httpapi.BatchConfig{MaxBatch: 16, MaxDelay: 2 * time.Millisecond, MaxQueue: 256}})
//	srv := httpapi.NewServer(httpapi.Config{Node: "node0"}, local)
//	srv.Remote = httpapi.NewRouter(rpcClient, peers, httpapi.Limits{}) // models served elsewhere
//	srv.Stats = &httpapi.RPCStats{Client: rpcClient, Addr: selfRPC}    // jobs for /metrics and /
//	httpapi.RegisterRPC(rpcServer, local, httpapi.Limits{})            // http.infer, http.models
//	go srv.Serve(listener)
//
// Layout: protocol.go and scan.go decode requests (limits first, then a one-pass JSON
// scanner; the binary tensor extension), encode.go writes responses, batch.go is the pure
// batching decision (time passed in), runner.go drives it per model, local.go holds the
// served models and checks inputs against their metadata, route.go forwards to other
// nodes over rpc, metrics.go writes the Prometheus text format, dashboard.go/.html is the
// page, node.go is the node component (served models recorded and reloaded from SDFS).
