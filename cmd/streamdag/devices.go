package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/streamdag/streamdag/gpu/nvml"
	"github.com/streamdag/streamdag/gpu/opencl"
)

func newDevicesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List the devices streamdag can use (the CPU, GPUs through NVML, OpenCL platforms and devices)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv, err := nvml.Discover(cmd.Context())
			if err != nil {
				return err
			}
			return writeDevices(cmd.OutOrStdout(), inv, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write the inventory as JSON")
	return cmd
}

// writeDevices writes inventory inv and this host's OpenCL platforms to
// out, as tables or (asJSON) as one JSON document.
func writeDevices(out io.Writer, inv nvml.Inventory, asJSON bool) error {
	plats, clErr := opencl.Platforms()
	if asJSON {
		return writeDevicesJSON(out, inv, plats, clErr)
	}
	if err := writeDevicesTable(out, inv); err != nil {
		return err
	}
	return writeOpenCLTable(out, plats, clErr)
}

func writeDevicesTable(out io.Writer, inv nvml.Inventory) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tKIND\tNAME\tMEMORY\tCC\tPCI BUS ID\tNUMA\tNVLINKS")
	links := map[string]int{}
	for _, l := range inv.Links {
		links[l.Device.String()]++
	}
	for _, d := range inv.Devices {
		nv := "-"
		if n := links[d.ID.String()]; n > 0 {
			nv = fmt.Sprint(n)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.1f GiB\t%s\t%s\t%s\t%s\n", d.ID, d.ID.Kind, d.Name,
			float64(d.MemoryBytes)/(1<<30), dash(d.ComputeCapability.String()), dash(d.PCIBusID), numa(d.NUMANode), nv)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, inv.NVML) // "NVML available (…)" or "NVML unavailable (…): why"
	if gpus := inv.GPUs(); len(gpus) > 1 && len(inv.P2P) > 0 {
		fmt.Fprintln(out, "\nP2P matrix (as nvidia-smi topo -m: NV# = NVLink links, else the PCIe common ancestor;")
		fmt.Fprintln(out, "then the P2P read/write status: OK, CNS chipset / GNS GPU / TNS topology not supported, NS, U, - unknown):")
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprint(w, "")
		for _, g := range gpus {
			fmt.Fprintf(w, "\t%s", g.ID)
		}
		fmt.Fprintln(w)
		for _, a := range gpus {
			fmt.Fprint(w, a.ID)
			for _, b := range gpus {
				cell := "X"
				if p, ok := inv.Pair(a.ID, b.ID); ok {
					rw := p.Read.String()
					if p.Write != p.Read {
						rw += "/" + p.Write.String()
					}
					cell = p.Label() + " " + rw
				}
				fmt.Fprintf(w, "\t%s", cell)
			}
			fmt.Fprintln(w)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if len(inv.MIG) > 0 {
		fmt.Fprintln(out)
		for _, m := range inv.MIG {
			fmt.Fprintf(out, "MIG: %s/%d %s %.1f GiB\n", m.Parent, m.Index, m.UUID, float64(m.MemoryBytes)/(1<<30))
		}
	}
	for _, n := range inv.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	return nil
}

type jsonDevice struct {
	ID                string `json:"id"`
	Kind              string `json:"kind"`
	Name              string `json:"name"`
	UUID              string `json:"uuid"`
	MemoryBytes       int64  `json:"memory_bytes"`
	ComputeCapability string `json:"compute_capability"`
	PCIBusID          string `json:"pci_bus_id"`
	NUMANode          int    `json:"numa_node"`
}

// jsonPair is one ordered GPU pair of the optional "p2p" section, present
// only when NVML answered for at least two GPUs.
type jsonPair struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Label    string `json:"label"` // "NV12", "PIX", …, "SYS", "-"
	NVLinks  int    `json:"nvlinks"`
	Read     string `json:"read"` // "OK", "CNS", "GNS", "TNS", "NS", "U", "-"
	Write    string `json:"write"`
	NVLink   string `json:"nvlink"`
	Atomics  string `json:"atomics"`
	Ancestor string `json:"ancestor"`
}

// writeOpenCLTable lists the OpenCL platforms and their devices, or says
// why there are none.
func writeOpenCLTable(out io.Writer, plats []opencl.Platform, clErr error) error {
	if clErr != nil {
		_, err := fmt.Fprintf(out, "OpenCL: none (%v)\n", clErr)
		return err
	}
	fmt.Fprintf(out, "\nOpenCL: %s\n", plural(len(plats), "platform"))
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "PLATFORM\tDEVICE\tTYPE\tVERSION\tCOMPUTE UNITS\tMEMORY")
	for _, p := range plats {
		if len(p.Devices) == 0 {
			fmt.Fprintf(w, "%s\t(no devices)\t-\t%s\t-\t-\n", p.Name, p.Version)
		}
		for _, d := range p.Devices {
			i := d
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%.1f GiB\n", p.Name, i.Name, i.Type, i.Version, i.ComputeUnits,
				float64(i.GlobalMemBytes)/(1<<30))
		}
	}
	return w.Flush()
}

// jsonOpenCL is the "opencl" section: the platforms and devices, or why
// there are none.
type jsonOpenCL struct {
	Available bool             `json:"available"`
	Reason    string           `json:"reason"`
	Platforms []jsonCLPlatform `json:"platforms"`
}

type jsonCLPlatform struct {
	Name    string         `json:"name"`
	Vendor  string         `json:"vendor"`
	Version string         `json:"version"`
	Devices []jsonCLDevice `json:"devices"`
}

type jsonCLDevice struct {
	Name          string `json:"name"`
	Vendor        string `json:"vendor"`
	Type          string `json:"type"`
	Version       string `json:"version"`
	DriverVersion string `json:"driver_version"`
	ComputeUnits  int    `json:"compute_units"`
	MemoryBytes   int64  `json:"memory_bytes"`
}

func openCLJSON(plats []opencl.Platform, clErr error) jsonOpenCL {
	j := jsonOpenCL{Available: clErr == nil, Platforms: []jsonCLPlatform{}}
	if clErr != nil {
		j.Reason = clErr.Error()
		return j
	}
	for _, p := range plats {
		jp := jsonCLPlatform{Name: p.Name, Vendor: p.Vendor, Version: p.Version, Devices: []jsonCLDevice{}}
		for _, d := range p.Devices {
			i := d
			jp.Devices = append(jp.Devices, jsonCLDevice{Name: i.Name, Vendor: i.Vendor, Type: i.Type,
				Version: i.Version, DriverVersion: i.DriverVersion, ComputeUnits: i.ComputeUnits, MemoryBytes: i.GlobalMemBytes})
		}
		j.Platforms = append(j.Platforms, jp)
	}
	return j
}

func writeDevicesJSON(w io.Writer, inv nvml.Inventory, plats []opencl.Platform, clErr error) error {
	out := struct {
		NVML struct {
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
			Driver    string `json:"driver"`
		} `json:"nvml"`
		Devices []jsonDevice `json:"devices"`
		P2P     []jsonPair   `json:"p2p,omitempty"`
		OpenCL  jsonOpenCL   `json:"opencl"`
	}{OpenCL: openCLJSON(plats, clErr)}
	out.NVML.Available, out.NVML.Reason, out.NVML.Driver = inv.NVML.Available, inv.NVML.Reason, inv.NVML.Driver
	out.Devices = []jsonDevice{}
	for _, d := range inv.Devices {
		out.Devices = append(out.Devices, jsonDevice{ID: d.ID.String(), Kind: d.ID.Kind.String(), Name: d.Name,
			UUID: d.UUID, MemoryBytes: d.MemoryBytes, ComputeCapability: d.ComputeCapability.String(),
			PCIBusID: d.PCIBusID, NUMANode: d.NUMANode})
	}
	for _, p := range inv.P2P {
		out.P2P = append(out.P2P, jsonPair{From: p.From.String(), To: p.To.String(), Label: p.Label(), NVLinks: p.NVLinks,
			Read: p.Read.String(), Write: p.Write.String(), NVLink: p.NVLink.String(), Atomics: p.Atomics.String(),
			Ancestor: p.Ancestor.String()})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func numa(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
