// Package sched is the scheduling logic (coordinator or standby, worker executor) and the
// node's config; package node wires a node's subsystems together.
package sched

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
)

// Port offsets from a node's base port. Node i of a local cluster with base port P uses
// base P+10*i, so its failure detector listens on UDP P+10*i, its RPC server on TCP P+10*i+1
// and its HTTP server on TCP P+10*i+2.
const (
	OffsetFD     = 0
	OffsetRPC    = 1
	OffsetHTTP   = 2
	PortsPerNode = 10
)

// NodeConfig is everything one node needs to start. It is read from a JSON file
// (`idunno node --config FILE`) or built from flags.
type NodeConfig struct {
	Name        string   `json:"name"`        // node0, node1, ...
	Host        string   `json:"host"`        // address other nodes reach this one at
	BasePort    int      `json:"base_port"`   // see the Offset constants
	DataDir     string   `json:"data_dir"`    // log file, SDFS blocks, journals
	Introducers []string `json:"introducers"` // fd (UDP) addresses of nodes to join through
	Secret      string   `json:"secret"`      // cluster secret; IDUNNO_SECRET overrides when empty
	Threads     int      `json:"threads"`     // kernel threads per model instance (default 1)
	HTTPToken   string   `json:"http_token"`  // bearer token for the HTTP endpoint; IDUNNO_HTTP_TOKEN when empty
	// FDNice is the nice value of the failure detector's threads (default DefaultFDNice);
	// ComputeNice that of the worker's task threads and the kernel threads they start
	// (default DefaultComputeNice). The process itself stays at its normal priority, so a
	// node never starves the machine's other work: only its heartbeats are raised, and only
	// its compute lowered. Nil means the default; 0 leaves the threads as they are.
	FDNice      *int `json:"fd_nice,omitempty"`
	ComputeNice *int `json:"compute_nice,omitempty"`
	// MaxLoaders bounds how many workers load one job's model at once when this node
	// coordinates (dispatch.Config.MaxLoaders; 0, the default, is no bound). Nodes that
	// share a machine's cores set it to the cores: more loads at once only share them.
	MaxLoaders int `json:"max_loaders,omitempty"`
}

// Default thread priorities (see NodeConfig.FDNice and ComputeNice). Lowering nice below 0
// needs CAP_SYS_NICE; without it the detector runs at the process's priority and says so
// in the log.
const (
	DefaultFDNice      = -10
	DefaultComputeNice = 10
)

// FDThreadNice is the failure detector's thread nice value (FDNice or its default).
func (c NodeConfig) FDThreadNice() int {
	if c.FDNice != nil {
		return *c.FDNice
	}
	return DefaultFDNice
}

// ComputeThreadNice is the compute threads' nice value (ComputeNice or its default).
func (c NodeConfig) ComputeThreadNice() int {
	if c.ComputeNice != nil {
		return *c.ComputeNice
	}
	return DefaultComputeNice
}

// FDAddr is the failure detector's UDP address.
func (c NodeConfig) FDAddr() string { return c.addr(OffsetFD) }

// RPCAddr is the internal RPC server's TCP address.
func (c NodeConfig) RPCAddr() string { return c.addr(OffsetRPC) }

// HTTPAddr is the HTTP endpoint's TCP address.
func (c NodeConfig) HTTPAddr() string { return c.addr(OffsetHTTP) }

func (c NodeConfig) addr(off int) string {
	return net.JoinHostPort(c.Host, strconv.Itoa(c.BasePort+off))
}

// SecretBytes returns the cluster secret, from the config or else from IDUNNO_SECRET.
func (c NodeConfig) SecretBytes() ([]byte, error) {
	s := c.Secret
	if s == "" {
		s = os.Getenv("IDUNNO_SECRET")
	}
	if s == "" {
		return nil, fmt.Errorf("sched: no cluster secret: set \"secret\" in the config or IDUNNO_SECRET")
	}
	return []byte(s), nil
}

// HTTPBearerToken returns the token the HTTP endpoint requires, from the config or else
// from IDUNNO_HTTP_TOKEN; empty means the endpoint is open (no authentication).
func (c NodeConfig) HTTPBearerToken() string {
	if c.HTTPToken != "" {
		return c.HTTPToken
	}
	return os.Getenv("IDUNNO_HTTP_TOKEN")
}

// Validate checks that the config can start a node.
func (c NodeConfig) Validate() error {
	switch {
	case c.Name == "":
		return fmt.Errorf("sched: config: name is empty")
	case c.Host == "":
		return fmt.Errorf("sched: config: host is empty")
	case c.BasePort <= 0 || c.BasePort+PortsPerNode > 65535:
		return fmt.Errorf("sched: config: base_port %d out of range", c.BasePort)
	case c.DataDir == "":
		return fmt.Errorf("sched: config: data_dir is empty")
	case c.FDThreadNice() < -20 || c.FDThreadNice() > 19 || c.ComputeThreadNice() < -20 || c.ComputeThreadNice() > 19:
		return fmt.Errorf("sched: config: fd_nice %d and compute_nice %d must be within -20..19", c.FDThreadNice(), c.ComputeThreadNice())
	}
	_, err := c.SecretBytes()
	return err
}

// LoadConfig reads a NodeConfig from a JSON file.
func LoadConfig(path string) (NodeConfig, error) {
	var c NodeConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("sched: read config: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("sched: parse config %s: %w", path, err)
	}
	if c.Threads <= 0 {
		c.Threads = 1
	}
	return c, c.Validate()
}
