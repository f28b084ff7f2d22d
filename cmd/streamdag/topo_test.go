package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/testdata"
)

type topoOut struct {
	Devices []struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		NUMANode  int    `json:"numa_node"`
		Model     string `json:"model"`
		ModelFrom string `json:"model_from"`
	} `json:"devices"`
	Links []struct {
		Src, Dst          string
		Kind              string   `json:"kind"`
		NVLinks           int      `json:"nvlinks"`
		P2P               bool     `json:"p2p"`
		BandwidthBps      float64  `json:"bandwidth_bps"`
		LatencyNs         int64    `json:"latency_ns"`
		Route             string   `json:"route"`
		RouteBandwidthBps float64  `json:"route_bandwidth_bps"`
		Path              []string `json:"path"`
		CostNs            int64    `json:"cost_ns"`
	} `json:"links"`
}

func topoJSON(t *testing.T, args ...string) topoOut {
	t.Helper()
	code, out, errs := runArgs(t, append([]string{"topo", "--json"}, args...)...)
	require.Equal(t, 0, code, errs)
	var o topoOut
	require.NoError(t, json.Unmarshal([]byte(out), &o), out)
	return o
}

func TestTopoDGX1JSON(t *testing.T) {
	dir := testdata.Topologies(t)
	o := topoJSON(t, "--file", filepath.Join(dir, "dgx1-v100.topo-m.txt"), "--gpu", "V100")
	require.Len(t, o.Devices, 9)
	assert.Equal(t, "cpu", o.Devices[0].ID)
	assert.Equal(t, "gpu7", o.Devices[8].ID)
	assert.Equal(t, 1, o.Devices[8].NUMANode)
	assert.Equal(t, "V100", o.Devices[1].Model)
	assert.Equal(t, "--gpu V100", o.Devices[1].ModelFrom)
	require.Len(t, o.Links, 56)
	min := map[string]float64{}
	max := map[string]float64{}
	for _, l := range o.Links {
		k := l.Kind
		if _, ok := min[k]; !ok || l.BandwidthBps < min[k] {
			min[k] = l.BandwidthBps
		}
		max[k] = func() float64 {
			if l.BandwidthBps > max[k] {
				return l.BandwidthBps
			}
			return max[k]
		}()
		assert.Equal(t, l.Src, l.Path[0])
		assert.Equal(t, l.Dst, l.Path[len(l.Path)-1])
		assert.Positive(t, l.CostNs)
		if k == "SYS" {
			assert.False(t, l.P2P)
			assert.Equal(t, "via-gpu", l.Route, "%s→%s relays over NVLink", l.Src, l.Dst)
		}
	}
	assert.InDelta(t, 25e9, min["NV1"], 1e5, "1 × 25 GB/s (NVLink 2)")
	assert.InDelta(t, 50e9, min["NV2"], 1e5, "2 × 25 GB/s")
	assert.Greater(t, min["NV2"], max["NV1"], "NV2 pairs faster than NV1 pairs")
	assert.Greater(t, min["NV1"], max["SYS"], "NV1 pairs faster than SYS pairs")
	assert.InDelta(t, 7.88e9, max["SYS"], 1e7, "SYS: staged through the host, two PCIe Gen3 legs")
}

func TestTopoRTX5090NoP2P(t *testing.T) {
	dir := testdata.Topologies(t)
	o := topoJSON(t, "--file", filepath.Join(dir, "rtx5090-2gpu-no-p2p.topo-m.txt"),
		"--p2p", filepath.Join(dir, "rtx5090-2gpu-no-p2p.topo-p2p.txt"), "--gpu", "RTX5090")
	require.Len(t, o.Links, 2)
	for _, l := range o.Links {
		assert.Equal(t, "PHB", l.Kind)
		assert.False(t, l.P2P)
		assert.Equal(t, "via-host", l.Route)
		assert.Equal(t, []string{l.Src, "cpu", l.Dst}, l.Path)
	}
	// The JSON twin gives the same answer, and the text output says so.
	code, out, errs := runArgs(t, "topo", "--file", filepath.Join(dir, "rtx5090-2gpu-no-p2p.json"))
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "gpu0→cpu→gpu1")
	assert.Contains(t, out, "no (GNS)")
	assert.Contains(t, out, "gpu model: RTX5090 from the machine's description", "the description names the model, as for sim:")
}

func TestTopoText(t *testing.T) {
	dir := testdata.Topologies(t)
	code, out, errs := runArgs(t, "topo", "--file", filepath.Join(dir, "raw", "dgx-a100-10nic-tabs.txt"), "--gpu", "h100", "--bytes", "1048576")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "gpu model: H100 from --gpu h100")
	assert.Contains(t, out, "NV12 300.0")
	assert.Contains(t, out, "for 1048576 bytes")
	lines := strings.Split(out, "\n")
	assert.Greater(t, len(lines), 8+56)
}

// A file that begins with a UTF-8 byte-order mark (as Windows tools save
// it) reads as the file without one: the JSON one as JSON, its description
// naming the GPU model.
func TestTopoFileWithBOM(t *testing.T) {
	topo, dir := testdata.Topologies(t), t.TempDir()
	withBOM := func(name string) string {
		b, err := os.ReadFile(filepath.Join(topo, name))
		require.NoError(t, err)
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, append([]byte("\ufeff"), b...), 0o644))
		return path
	}
	same := func(t *testing.T, plain, marked []string) {
		code, want, errs := runArgs(t, plain...)
		require.Equal(t, 0, code, errs)
		code, got, errs := runArgs(t, marked...)
		require.Equal(t, 0, code, errs)
		assert.Equal(t, want, got)
	}
	t.Run("json", func(t *testing.T) {
		name := "rtx5090-2gpu-no-p2p.json"
		same(t, []string{"topo", "--file", filepath.Join(topo, name)}, []string{"topo", "--file", withBOM(name)})
	})
	t.Run("topo -m and -p2p", func(t *testing.T) {
		m, p2p := "rtx5090-2gpu-no-p2p.topo-m.txt", "rtx5090-2gpu-no-p2p.topo-p2p.txt"
		same(t, []string{"topo", "--file", filepath.Join(topo, m), "--p2p", filepath.Join(topo, p2p)},
			[]string{"topo", "--file", withBOM(m), "--p2p", withBOM(p2p)})
	})
}

func TestTopoNoFileCPUOnly(t *testing.T) {
	code, out, errs := runArgs(t, "topo")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "source: this machine's inventory")
	if strings.Contains(out, "no GPUs found") {
		assert.Contains(t, out, "only the host CPU device")
		o := topoJSON(t)
		require.Len(t, o.Devices, 1)
		assert.Equal(t, "cpu", o.Devices[0].ID)
		assert.Empty(t, o.Links)
	}
}

func TestTopoErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	require.NoError(t, os.WriteFile(bad, []byte("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV2\t X \n"), 0o644))
	code, _, errs := runArgs(t, "topo", "--file", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "line 3, col 6")
	assert.Contains(t, errs, "asymmetric")

	code, _, errs = runArgs(t, "topo", "--file", filepath.Join(dir, "missing.txt"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "missing.txt")

	code, _, errs = runArgs(t, "topo", "--gpu", "Voodoo5")
	assert.Equal(t, 2, code)
	assert.Contains(t, errs, `unknown --gpu "Voodoo5"`)

	code, _, _ = runArgs(t, "topo", "--bytes", "-1")
	assert.Equal(t, 2, code)
	code, _, _ = runArgs(t, "topo", "--p2p-mode", "z")
	assert.Equal(t, 2, code)

	t.Run("p2p size mismatch", func(t *testing.T) {
		topo := testdata.Topologies(t)
		// A p2p matrix of 2 GPUs does not fit an 8-GPU machine.
		code, _, errs = runArgs(t, "topo", "--file", filepath.Join(topo, "dgx1-v100.topo-m.txt"), "--p2p", filepath.Join(topo, "rtx5090-2gpu-no-p2p.topo-p2p.txt"))
		assert.Equal(t, 1, code)
		assert.Contains(t, errs, "2 GPUs")
	})
}
