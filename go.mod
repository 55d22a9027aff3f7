module idunno

go 1.26.8

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	google.golang.org/protobuf v1.36.12
)
