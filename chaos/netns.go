// Package chaos runs real idunno node processes on separate network namespaces, cuts and
// heals the links between them, and checks what clients were told against what the
// cluster holds afterwards (the Jepsen method).
package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrUnavailable is returned by NewNet (wrapped) when this machine cannot create network
// namespaces: not root, no `ip` command, or a kernel that refuses. Tests skip on it.
var ErrUnavailable = errors.New("chaos: network namespaces unavailable")

// Host is one network namespace with one interface (eth0) on the test's bridge.
type Host struct {
	NS   string // namespace name (ip netns)
	IP   string // its address in the private /24
	Veth string // the root-side end of its veth pair, enslaved to the bridge
	MAC  string // eth0's hardware address inside the namespace
}

// Net is one test's private network: N namespaces, each linked by a veth pair to a bridge
// in the root namespace. The bridge holds the subnet's .254 address, so the test process
// (in the root namespace) reaches every host directly; cuts between hosts leave the
// test's own links alone. Names carry the creating process's pid, so concurrent tests
// (and their cleanup) never touch each other's namespaces.
//
// Links are cut without netfilter (iptables and tc netem are often missing): a one-way cut
// from A to B gives A a permanent neighbour entry for B's address with a hardware address
// nobody owns, so A's frames to B leave A and are dropped by the bridge's other ports,
// silently, as on a real partition (no error comes back to the sender, TCP retransmits and
// times out). Healing deletes the entry, and A asks ARP again. A whole host is cut off
// (from everyone, the test included) by taking its veth down.
type Net struct {
	Hosts []Host

	id     string // "<pid>x<seq>"
	bridge string
	prefix string // "10.77.X."

	mu   sync.Mutex
	cuts map[[2]int]bool // from, to
	down map[int]bool
}

var netSeq struct {
	sync.Mutex
	n int
}

// Available reports why network namespaces cannot be used here (nil when they can).
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN)", ErrUnavailable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: no ip command (Debian package iproute2)", ErrUnavailable)
	}
	return nil
}

// NewNet creates n namespaces on a fresh bridge. Close removes everything it made.
func NewNet(n int) (*Net, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if n < 1 || n > 250 {
		return nil, fmt.Errorf("chaos: %d hosts (1 to 250)", n)
	}
	netSeq.Lock()
	netSeq.n++
	seq := netSeq.n
	netSeq.Unlock()
	id := fmt.Sprintf("%dx%d", os.Getpid(), seq)
	nt := &Net{id: id, bridge: "idb" + id, cuts: map[[2]int]bool{}, down: map[int]bool{}}
	if len(nt.bridge) > 15 {
		return nil, fmt.Errorf("chaos: interface name %s too long", nt.bridge)
	}
	x, err := freeSubnet(os.Getpid() + seq)
	if err != nil {
		return nil, err
	}
	nt.prefix = fmt.Sprintf("10.77.%d.", x)
	if err := nt.build(n); err != nil {
		nt.Close()
		if strings.Contains(err.Error(), "Operation not permitted") {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return nil, err
	}
	return nt, nil
}

// freeSubnet picks X in 1..250 such that no interface holds an address in 10.77.X.0/24,
// starting from a value derived from seed.
func freeSubnet(seed int) (int, error) {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("%w: ip addr: %v", ErrUnavailable, err)
	}
	used := string(out)
	for i := 0; i < 250; i++ {
		x := 1 + (seed+i)%250
		if !strings.Contains(used, fmt.Sprintf(" 10.77.%d.", x)) {
			return x, nil
		}
	}
	return 0, errors.New("chaos: every 10.77.X.0/24 is in use")
}

func (nt *Net) build(n int) error {
	if err := ip("link", "add", nt.bridge, "type", "bridge"); err != nil {
		return err
	}
	if err := ip("addr", "add", nt.prefix+"254/24", "dev", nt.bridge); err != nil {
		return err
	}
	if err := ip("link", "set", nt.bridge, "up"); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		h := Host{NS: fmt.Sprintf("idunno-%s-%d", nt.id, i), IP: nt.prefix + strconv.Itoa(i+1),
			Veth: fmt.Sprintf("idv%sn%d", nt.id, i)}
		if len(h.Veth) > 15 {
			return fmt.Errorf("chaos: interface name %s too long", h.Veth)
		}
		if err := ip("netns", "add", h.NS); err != nil {
			return err
		}
		nt.Hosts = append(nt.Hosts, h) // from here on Close removes it
		steps := [][]string{
			{"link", "add", h.Veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
			{"link", "set", h.Veth, "master", nt.bridge},
			{"link", "set", h.Veth, "up"},
			{"-n", h.NS, "addr", "add", h.IP + "/24", "dev", "eth0"},
			{"-n", h.NS, "link", "set", "eth0", "up"},
			{"-n", h.NS, "link", "set", "lo", "up"},
		}
		for _, s := range steps {
			if err := ip(s...); err != nil {
				return err
			}
		}
		out, err := exec.Command("ip", "-n", h.NS, "-o", "link", "show", "eth0").Output()
		if err != nil {
			return fmt.Errorf("chaos: eth0 of %s: %v", h.NS, err)
		}
		f := strings.Fields(string(out))
		for j := range f {
			if f[j] == "link/ether" && j+1 < len(f) {
				nt.Hosts[i].MAC = f[j+1]
			}
		}
	}
	return nil
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Gateway is the test process's address on the bridge.
func (nt *Net) Gateway() string { return nt.prefix + "254" }

// Command returns a command that runs name inside host i's namespace. `ip netns exec`
// execs name in place, so the command's pid is the program's.
func (nt *Net) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", nt.Hosts[i].NS, name}, args...)...)
}

// CutOneWay drops every packet host from sends to host to (to's packets to from still
// arrive).
func (nt *Net) CutOneWay(from, to int) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	return nt.cutLocked(from, to)
}

func (nt *Net) cutLocked(from, to int) error {
	if from == to || nt.cuts[[2]int{from, to}] {
		return nil
	}
	// A locally administered address no host has: 02:77:00:00:<from>:<to>.
	bogus := fmt.Sprintf("02:77:00:00:%02x:%02x", from, to)
	h := nt.Hosts[from]
	if err := ip("-n", h.NS, "neigh", "replace", nt.Hosts[to].IP, "lladdr", bogus, "nud", "permanent", "dev", "eth0"); err != nil {
		return err
	}
	nt.cuts[[2]int{from, to}] = true
	return nil
}

func (nt *Net) healLocked(from, to int) error {
	if !nt.cuts[[2]int{from, to}] {
		return nil
	}
	h := nt.Hosts[from]
	// The real address, as reachable; ARP refreshes it from there.
	if err := ip("-n", h.NS, "neigh", "replace", nt.Hosts[to].IP, "lladdr", nt.Hosts[to].MAC, "nud", "reachable", "dev", "eth0"); err != nil {
		return err
	}
	delete(nt.cuts, [2]int{from, to})
	return nil
}

// Cut drops packets both ways between hosts a and b.
func (nt *Net) Cut(a, b int) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	return errors.Join(nt.cutLocked(a, b), nt.cutLocked(b, a))
}

// Partition cuts every pair of hosts in different groups, both ways. Hosts in no group
// keep their links.
func (nt *Net) Partition(groups ...[]int) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	var errs []error
	for g := range groups {
		for h := range groups {
			if g == h {
				continue
			}
			for _, a := range groups[g] {
				for _, b := range groups[h] {
					errs = append(errs, nt.cutLocked(a, b))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Heal restores every cut link and brings every downed host back up.
func (nt *Net) Heal() error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	var errs []error
	for c := range nt.cuts {
		errs = append(errs, nt.healLocked(c[0], c[1]))
	}
	for i := range nt.down {
		errs = append(errs, nt.setLink(i, true))
	}
	return errors.Join(errs...)
}

// LinkDown cuts host i off from everyone (the test process included) by taking its veth
// down; LinkUp brings it back.
func (nt *Net) LinkDown(i int) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	return nt.setLink(i, false)
}

// LinkUp undoes LinkDown.
func (nt *Net) LinkUp(i int) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	return nt.setLink(i, true)
}

func (nt *Net) setLink(i int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	if err := ip("link", "set", nt.Hosts[i].Veth, state); err != nil {
		return err
	}
	if up {
		delete(nt.down, i)
	} else {
		nt.down[i] = true
	}
	return nil
}

// Close deletes the namespaces, veths and bridge this Net created (a namespace's veth end
// goes with it). Processes still running in a namespace keep it alive until they exit:
// stop them first.
func (nt *Net) Close() error {
	var errs []error
	for _, h := range nt.Hosts {
		if h.Veth != "" {
			exec.Command("ip", "link", "del", h.Veth).Run() // gone already if its namespace went
		}
		errs = append(errs, ip("netns", "del", h.NS))
	}
	nt.Hosts = nil
	if nt.bridge != "" {
		errs = append(errs, ip("link", "del", nt.bridge))
		nt.bridge = ""
	}
	return errors.Join(errs...)
}

// waitFor polls cond every 50 ms until it holds or limit passes.
func waitFor(limit time.Duration, cond func() bool) bool {
	end := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
