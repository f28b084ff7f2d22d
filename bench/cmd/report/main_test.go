package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/streamdag/streamdag/bench"
)

// TestMarkdownProfiles: a profile's breakdown is rendered as a table of
// ns per unit and shares, with the other goroutines' time stated for a
// labelled profile.
func TestMarkdownProfiles(t *testing.T) {
	rep := Report{
		Machine: map[string]string{"cpu": "test"},
		Builds:  []Build{{Shape: "chain-10k", Kernels: 10_000, BuildNsPerKernel: 200}},
		Profiles: []Profile{{
			What: "graph build, chain-10k", Unit: "kernel", Labelled: true,
			Breakdown: bench.Breakdown{Runs: 4, Units: 40_000_000, Wall: 8 * time.Second, Total: 8_000_000_000, Elsewhere: 50,
				Shares: []bench.Share{
					{Category: "dag: AddKernel, AddValue", Ns: 6_000_000_000, Fraction: 0.75, PerUnit: 150},
					{Category: "caller: formatting names", Ns: 2_000_000_000, Fraction: 0.25, PerUnit: 50},
				}},
		}},
	}
	md := markdown(rep)
	assert.Contains(t, md, "| graph build, worst shape | ≤ 150 ns/kernel | 200 ns/kernel (build floor")
	assert.Contains(t, md, "CPU profile of graph build, chain-10k: 4 runs over 8s, 200 ns/kernel of wall time")
	assert.Contains(t, md, "mostly the collector's mark workers on the core the build leaves idle, took 50 ns/kernel more")
	assert.Contains(t, md, "| dag: AddKernel, AddValue | 150.0 | 75% |\n")
	assert.Contains(t, md, "| caller: formatting names | 50.0 | 25% |\n")
	assert.True(t, strings.HasSuffix(md, "| total | 200.0 | |\n"), md)
}
