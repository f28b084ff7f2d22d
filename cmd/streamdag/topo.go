package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamdag/streamdag/gpu/nvml"
	"github.com/streamdag/streamdag/topology"

	"github.com/streamdag/streamdag/internal/cli"
)

// topoOptions are the flags of `streamdag topo`.
type topoOptions struct {
	file, p2p, p2pMode, gpuName string
	bytes                       int64
	asJSON                      bool
}

func newTopoCmd() *cobra.Command {
	var o topoOptions
	cmd := &cobra.Command{
		Use:   "topo [--file topo.txt|topo.json] [--p2p p2p.txt] [--gpu NAME] [--json]",
		Short: "Show the GPU interconnect: link kinds, P2P, GB/s and the best route of each pair",
		Long: `Show the GPU interconnect of this machine (from the GPU inventory) or of the
machine described by --file: the text of "nvidia-smi topo -m", or a JSON
description ({"gpus", "matrix", "numa", "cpu_affinity", "p2p", "gpu"}).
--p2p adds the text of "nvidia-smi topo -p2p r" (--p2p-mode names the
capability queried: r, w, n or a).

The text of nvidia-smi does not name the GPU model, which sets the NVLink
rate and the PCIe generation: --gpu NAME (H100, V100, A100, B200, RTX5090,
…) sets it, else the inventory's compute capability or name, else the
default (A100). The output says which was used.

For each ordered GPU pair it prints the link, whether P2P works (reported,
or estimated: "est"), the pair's own bandwidth (P2P, or the staged copy
through the host when P2P does not work), and the best route for --bytes
(direct, via one GPU, or through the host) with its modelled time.

--json writes {"devices":[{"id","name","numa_node"}], "links":[{"src","dst",
"kind","nvlinks","p2p","p2p_estimated","p2p_status","direct_bandwidth_bps",
"bandwidth_bps","latency_ns","route","route_bandwidth_bps","path","cost_ns"}],
…}: kind is the nvidia-smi label ("NV2", "SYS", "none"); bandwidth_bps and
latency_ns are those of the pair's own connection (P2P when it works, else
the staged copy through the host), in bytes/s and ns; route, path,
route_bandwidth_bps and cost_ns describe the best route for route_bytes,
which may go through another GPU.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTopo(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.file, "file", "", "nvidia-smi topo -m text or JSON description (default: this machine's inventory)")
	f.StringVar(&o.p2p, "p2p", "", "nvidia-smi topo -p2p text to add P2P status")
	f.StringVar(&o.p2pMode, "p2p-mode", "r", "capability the --p2p text reports: r, w, n or a")
	f.StringVar(&o.gpuName, "gpu", "", "GPU model for every GPU (H100, A100, V100, …); overrides the inventory")
	f.Int64Var(&o.bytes, "bytes", 64<<20, "transfer size the routes are chosen for, in bytes")
	f.BoolVar(&o.asJSON, "json", false, "write JSON")
	return cmd
}

// topoUsage returns a usage error (exit status 2).
func topoUsage(_ *cobra.Command, format string, args ...any) error {
	return cli.Usagef(format, args...)
}

func runTopo(cmd *cobra.Command, o topoOptions) error {
	var opts []topology.Option
	if o.gpuName != "" {
		spec, ok := topology.SpecByName(o.gpuName)
		if !ok {
			names := make([]string, len(topology.Specs))
			for i, s := range topology.Specs {
				names[i] = s.Name
			}
			return topoUsage(cmd, "unknown --gpu %q (known: %s)", o.gpuName, strings.Join(names, ", "))
		}
		opts = append(opts, topology.WithGPUSpec(spec))
	}
	if o.bytes < 0 {
		return topoUsage(cmd, "--bytes must be >= 0, got %d", o.bytes)
	}
	p2pCap, err := topology.ParseP2PCap(o.p2pMode)
	if err != nil {
		return topoUsage(cmd, "--p2p-mode %q: want r, w, n or a", o.p2pMode)
	}

	var facts topology.Facts
	var source string
	var notes []string
	if o.file != "" {
		m, err := loadMachine(o.file)
		if err != nil {
			return err
		}
		facts, source = m.facts, m.source
		if o.gpuName == "" && m.spec != nil {
			opts = append(opts, topology.WithGPUSpec(*m.spec)) // the model the machine's description names
		}
	} else {
		inv, err := nvml.Discover(cmd.Context())
		if err != nil {
			return err
		}
		source = "this machine's inventory (" + inv.NVML.String() + ")"
		facts = inv.Facts()
		if len(facts.GPUs) > 1 && facts.Pairs == nil {
			notes = append(notes, "NVML did not describe the links between GPUs: every pair is 'none' (copies through the host) unless --file gives nvidia-smi topo -m")
		}
	}
	if o.p2p != "" {
		fh, err := os.Open(o.p2p)
		if err != nil {
			return err
		}
		m, err := topology.ParseP2P(fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", o.p2p, err)
		}
		if err := facts.ApplyP2P(m, p2pCap); err != nil {
			return fmt.Errorf("%s: %w", o.p2p, err)
		}
	}
	topo, err := topology.New(facts, opts...)
	if err != nil {
		return err
	}
	if len(facts.GPUs) == 0 {
		notes = append(notes, "no GPUs: nothing to route; only the host CPU device is present")
	}
	rep := buildTopoReport(topo, source, o, notes)
	if o.asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeTopoText(cmd.OutOrStdout(), topo, rep)
}

type topoJSONDevice struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	NUMANode int    `json:"numa_node"`
	// Model and ModelFrom say which GPU spec the model used and why
	// (GPUs only).
	Model     string `json:"model,omitempty"`
	ModelFrom string `json:"model_from,omitempty"`
}

type topoJSONLink struct {
	Src                string            `json:"src"`
	Dst                string            `json:"dst"`
	Kind               string            `json:"kind"`
	NVLinks            int               `json:"nvlinks"`
	P2P                bool              `json:"p2p"`
	P2PEstimated       bool              `json:"p2p_estimated"`
	P2PStatus          map[string]string `json:"p2p_status"`
	DirectBandwidthBps float64           `json:"direct_bandwidth_bps"`
	BandwidthBps       float64           `json:"bandwidth_bps"`
	LatencyNs          int64             `json:"latency_ns"`
	Route              string            `json:"route"`
	RouteBandwidthBps  float64           `json:"route_bandwidth_bps"`
	Path               []string          `json:"path"`
	CostNs             int64             `json:"cost_ns"`
}

type topoReport struct {
	Source     string           `json:"source"`
	RouteBytes int64            `json:"route_bytes"`
	Devices    []topoJSONDevice `json:"devices"`
	Links      []topoJSONLink   `json:"links"`
	Notes      []string         `json:"notes"`
}

func specNote(origin topology.SpecOrigin, gpuFlag string) string {
	switch origin {
	case topology.SpecFromOption:
		if gpuFlag == "" {
			return "the machine's description"
		}
		return "--gpu " + gpuFlag
	case topology.SpecDefault:
		return "default (nothing names the GPU model; set --gpu)"
	default:
		return "inventory " + origin.String()
	}
}

func buildTopoReport(topo *topology.Topology, source string, o topoOptions, notes []string) topoReport {
	rep := topoReport{Source: source, RouteBytes: o.bytes, Devices: []topoJSONDevice{}, Links: []topoJSONLink{}, Notes: notes}
	if rep.Notes == nil {
		rep.Notes = []string{}
	}
	for _, d := range topo.Devices() {
		jd := topoJSONDevice{ID: d.ID.String(), Name: d.Name, NUMANode: d.NUMANode}
		if s, origin, ok := topo.GPUSpec(d.ID); ok {
			jd.Model, jd.ModelFrom = s.Name, specNote(origin, o.gpuName)
		}
		rep.Devices = append(rep.Devices, jd)
	}
	gpus := topo.GPUs()
	for _, a := range gpus {
		for _, b := range gpus {
			if a.ID == b.ID {
				continue
			}
			l, _ := topo.Link(a.ID, b.ID)
			r, err := topo.Route(o.bytes, a.ID, b.ID)
			if err != nil { // cannot happen: both devices are in topo
				continue
			}
			own, err := topo.PairRoute(o.bytes, a.ID, b.ID)
			if err != nil {
				continue
			}
			jl := topoJSONLink{Src: a.ID.String(), Dst: b.ID.String(), Kind: l.Label(), NVLinks: l.NVLinks,
				P2P: l.Direct, P2PEstimated: l.Estimated,
				P2PStatus: map[string]string{"read": l.P2P.Read.String(), "write": l.P2P.Write.String(),
					"nvlink": l.P2P.NVLink.String(), "atomics": l.P2P.Atomics.String()},
				DirectBandwidthBps: l.BandwidthBps, BandwidthBps: own.BandwidthBps(), LatencyNs: own.Latency().Nanoseconds(),
				Route: r.Kind.String(), RouteBandwidthBps: r.BandwidthBps(), CostNs: r.Cost.Nanoseconds()}
			for _, p := range r.Path {
				jl.Path = append(jl.Path, p.String())
			}
			rep.Links = append(rep.Links, jl)
		}
	}
	return rep
}

func gbps(bps float64) string {
	if bps <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", bps/1e9)
}

func writeTopoText(w io.Writer, topo *topology.Topology, rep topoReport) error {
	fmt.Fprintf(w, "source: %s\n", rep.Source)
	gpus := topo.GPUs()
	models := map[string][]string{}
	var order []string
	for _, d := range rep.Devices {
		if d.Model == "" {
			continue
		}
		k := d.Model + " from " + d.ModelFrom
		if _, ok := models[k]; !ok {
			order = append(order, k)
		}
		models[k] = append(models[k], d.ID)
	}
	for _, k := range order {
		fmt.Fprintf(w, "gpu model: %s (%s)\n", k, strings.Join(models[k], " "))
	}
	if len(gpus) == 0 {
		fmt.Fprintf(w, "no GPUs found: only the host CPU device (%s)\n", topo.Host().Name)
		for _, n := range rep.Notes {
			fmt.Fprintf(w, "note: %s\n", n)
		}
		return nil
	}
	fmt.Fprintf(w, "\nlink and direct P2P bandwidth (GB/s per direction; - = no P2P):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "")
	for _, d := range gpus {
		fmt.Fprintf(tw, "\t%s", d.ID)
	}
	fmt.Fprintln(tw, "\tNUMA")
	for _, a := range gpus {
		fmt.Fprint(tw, a.ID)
		for _, b := range gpus {
			l, _ := topo.Link(a.ID, b.ID)
			if a.ID == b.ID {
				fmt.Fprint(tw, "\tX")
				continue
			}
			fmt.Fprintf(tw, "\t%s %s", l.Label(), gbps(l.BandwidthBps))
		}
		fmt.Fprintf(tw, "\t%s\n", topoNUMA(a.NUMANode))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nbest route of each pair for %d bytes:\n", rep.RouteBytes)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SRC\tDST\tLINK\tP2P\tPAIR GB/s\tROUTE\tPATH\tROUTE GB/s\tTIME")
	for _, l := range rep.Links {
		p2p := "no"
		if l.P2P {
			p2p = "yes"
		}
		if l.P2PEstimated {
			p2p += " (est)"
		} else if l.P2PStatus["read"] != "-" && !l.P2P {
			p2p += " (" + l.P2PStatus["read"] + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Src, l.Dst, l.Kind, p2p, gbps(l.BandwidthBps),
			l.Route, strings.Join(l.Path, "→"), gbps(l.RouteBandwidthBps), fmtDuration(time.Duration(l.CostNs)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func topoNUMA(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
