package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/streamdag/streamdag/gpu"
)

func newDevicesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List the devices streamdag can use (the CPU, and GPUs through NVML)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv := gpu.Discover(cmd.Context())
			if asJSON {
				return writeDevicesJSON(cmd, inv)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tKIND\tNAME\tMEMORY\tCC\tPCI BUS ID\tNUMA")
			for _, d := range inv.Devices {
				fmt.Fprintf(w, "%s\t%s\t%s\t%.1f GiB\t%s\t%s\t%s\n", d.ID, d.ID.Kind, d.Name,
					float64(d.MemoryBytes)/(1<<30), dash(d.ComputeCapability.String()), dash(d.PCIBusID), numa(d.NUMANode))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "NVML: %s\n", inv.NVML)
			for _, n := range inv.Notes {
				fmt.Fprintf(cmd.OutOrStdout(), "note: %s\n", n)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write the inventory as JSON")
	return cmd
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

func writeDevicesJSON(cmd *cobra.Command, inv gpu.Inventory) error {
	out := struct {
		NVML struct {
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
			Driver    string `json:"driver"`
		} `json:"nvml"`
		Devices []jsonDevice `json:"devices"`
	}{}
	out.NVML.Available, out.NVML.Reason, out.NVML.Driver = inv.NVML.Available, inv.NVML.Reason, inv.NVML.Driver
	out.Devices = []jsonDevice{}
	for _, d := range inv.Devices {
		out.Devices = append(out.Devices, jsonDevice{ID: d.ID.String(), Kind: d.ID.Kind.String(), Name: d.Name,
			UUID: d.UUID, MemoryBytes: d.MemoryBytes, ComputeCapability: d.ComputeCapability.String(),
			PCIBusID: d.PCIBusID, NUMANode: d.NUMANode})
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
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
