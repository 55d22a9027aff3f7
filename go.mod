module idunno

go 1.26.8

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	google.golang.org/protobuf v1.36.12
)

require github.com/ebitengine/purego v0.11.3 // indirect
