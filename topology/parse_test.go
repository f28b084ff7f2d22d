package topology_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/topology"
)

func labels(f topology.Facts) [][]string {
	out := make([][]string, len(f.Pairs))
	for i, row := range f.Pairs {
		for j, p := range row {
			if i == j {
				out[i] = append(out[i], "X")
				continue
			}
			out[i] = append(out[i], p.Label())
		}
	}
	return out
}

func parseFile(t *testing.T, path string) topology.Facts {
	t.Helper()
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	var f topology.Facts
	if strings.HasSuffix(path, ".json") {
		f, err = topology.ParseJSON(fh)
	} else {
		f, err = topology.ParseMatrix(fh)
	}
	require.NoError(t, err, path)
	return f
}

// TestExamplesMatchJSONTwins parses every nvidia-smi topo -m example and
// checks it against the JSON description of the same machine.
func TestExamplesMatchJSONTwins(t *testing.T) {
	dir := testdata.Topologies(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.topo-m.txt"))
	require.NoError(t, err)
	if len(files) == 0 {
		testdata.TopologyFile(t, "dgx1-v100.topo-m.txt") // skips (fails under CI): none there
	}
	require.Len(t, files, 5)
	for _, txt := range files {
		name := strings.TrimSuffix(filepath.Base(txt), ".topo-m.txt")
		t.Run(name, func(t *testing.T) {
			got := parseFile(t, txt)
			want := parseFile(t, filepath.Join(dir, name+".json"))
			var raw struct {
				Matrix [][]string `json:"matrix"`
			}
			b, err := os.ReadFile(filepath.Join(dir, name+".json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &raw))
			assert.Equal(t, raw.Matrix, labels(got))
			assert.Equal(t, labels(want), labels(got))
			require.Len(t, got.GPUs, len(want.GPUs))
			for i := range got.GPUs {
				assert.Equal(t, topology.GPU(i), got.GPUs[i].ID)
				assert.Equal(t, want.GPUs[i].NUMANode, got.GPUs[i].NUMANode, "numa of gpu%d", i)
				assert.Equal(t, want.GPUs[i].CPUAffinity, got.GPUs[i].CPUAffinity, "cpu affinity of gpu%d", i)
			}
			assert.Empty(t, got.NICs)
		})
	}
}

func TestParseMatrixDGX1V100(t *testing.T) {
	f := parseFile(t, testdata.TopologyFile(t, "dgx1-v100.topo-m.txt"))
	require.Len(t, f.GPUs, 8)
	nv := func(i, j int) string { return f.Pairs[i][j].Label() }
	assert.Equal(t, "NV1", nv(0, 1))
	assert.Equal(t, "NV1", nv(0, 2))
	assert.Equal(t, "NV2", nv(0, 3))
	assert.Equal(t, "NV2", nv(0, 4))
	assert.Equal(t, "SYS", nv(0, 5))
	assert.Equal(t, "NV2", nv(1, 5))
	assert.Equal(t, "NV1", nv(7, 5))
	assert.Equal(t, 2, f.Pairs[0][3].NVLinks)
	assert.Equal(t, topology.LinkNVLink, f.Pairs[0][3].Kind)
	assert.Equal(t, topology.LinkSYS, f.Pairs[4][1].Kind)
	// Each V100 has 6 NVLinks in the hybrid cube-mesh.
	for i := range 8 {
		links := 0
		for j := range 8 {
			links += f.Pairs[i][j].NVLinks
		}
		assert.Equal(t, 6, links, "gpu%d", i)
	}
	want := append(seq(0, 11), seq(24, 35)...)
	assert.Equal(t, want, f.GPUs[0].CPUAffinity)
	assert.Equal(t, 1, f.GPUs[7].NUMANode)
	assert.Empty(t, f.GPUs[0].Name, "topo -m does not name the GPUs")
	assert.False(t, f.Pairs[0][1].P2P.Reported())
}

func seq(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

func TestParseMatrixRawDGXA100TenNICs(t *testing.T) {
	f := parseFile(t, testdata.TopologyFile(t, "raw/dgx-a100-10nic-tabs.txt"))
	require.Len(t, f.GPUs, 8)
	require.Len(t, f.NICs, 10)
	for i := range 8 {
		for j := range 8 {
			if i != j {
				assert.Equal(t, "NV12", f.Pairs[i][j].Label())
			}
		}
	}
	assert.Equal(t, []int{3, 3, 1, 1, 7, 7, 5, 5}, []int{f.GPUs[0].NUMANode, f.GPUs[1].NUMANode, f.GPUs[2].NUMANode,
		f.GPUs[3].NUMANode, f.GPUs[4].NUMANode, f.GPUs[5].NUMANode, f.GPUs[6].NUMANode, f.GPUs[7].NUMANode})
	assert.Equal(t, append(seq(48, 63), seq(176, 191)...), f.GPUs[0].CPUAffinity)
	for k, nic := range f.NICs {
		assert.Equal(t, "NIC"+string(rune('0'+k)), nic.Label)
		assert.Equal(t, "mlx5_"+string(rune('0'+k)), nic.Name, "from the NIC Legend")
		assert.Nil(t, nic.CPUAffinity)
		require.Len(t, nic.GPULinks, 8)
	}
	assert.Equal(t, topology.LinkPXB, f.NICs[0].GPULinks[0])
	assert.Equal(t, topology.LinkPXB, f.NICs[0].GPULinks[1])
	assert.Equal(t, topology.LinkSYS, f.NICs[0].GPULinks[2])
	assert.Equal(t, topology.LinkPXB, f.NICs[7].GPULinks[7])
	for _, k := range f.NICs[8].GPULinks {
		assert.Equal(t, topology.LinkSYS, k, "the storage NICs are SYS to every GPU")
	}
}

func TestParseMatrixRawDGX1P100OldLabels(t *testing.T) {
	f := parseFile(t, testdata.TopologyFile(t, "raw/dgx1-p100-soc-4nic-tabs.txt"))
	require.Len(t, f.GPUs, 8, "the mangled header GPU0GPU1…mlx5_0 is split")
	require.Len(t, f.NICs, 4)
	assert.Equal(t, []string{"mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"},
		[]string{f.NICs[0].Name, f.NICs[1].Name, f.NICs[2].Name, f.NICs[3].Name})
	assert.Equal(t, "NV1", f.Pairs[0][1].Label())
	assert.Equal(t, "NV1", f.Pairs[0][4].Label())
	assert.Equal(t, topology.LinkSYS, f.Pairs[0][5].Kind, "SOC is SYS")
	assert.Equal(t, topology.LinkSYS, f.Pairs[7][0].Kind)
	assert.Equal(t, topology.LinkPIX, f.NICs[0].GPULinks[0])
	assert.Equal(t, topology.LinkPHB, f.NICs[0].GPULinks[2])
	assert.Equal(t, topology.LinkSYS, f.NICs[0].GPULinks[4])
	for _, g := range f.GPUs {
		assert.Equal(t, []int{1}, g.CPUAffinity, "1-1")
		assert.Equal(t, -1, g.NUMANode, "no NUMA Affinity column")
	}
}

func TestParseMatrixA100NVLinkPairs(t *testing.T) {
	f := parseFile(t, testdata.TopologyFile(t, "a100-pcie-8gpu-nvlink-pairs.topo-m.txt"))
	assert.Equal(t, "NV12", f.Pairs[2][3].Label())
	assert.Equal(t, "NODE", f.Pairs[1][2].Label())
	assert.Nil(t, f.GPUs[4].CPUAffinity, "N/A")
	assert.Equal(t, 1, f.GPUs[4].NUMANode)
	assert.Equal(t, append(seq(0, 15), seq(56, 71)...), f.GPUs[3].CPUAffinity)
}

func TestParseP2PRTX5090(t *testing.T) {
	fh, err := os.Open(testdata.TopologyFile(t, "rtx5090-2gpu-no-p2p.topo-p2p.txt"))
	require.NoError(t, err)
	defer fh.Close()
	m, err := topology.ParseP2P(fh)
	require.NoError(t, err)
	assert.Equal(t, []topology.DeviceID{topology.GPU(0), topology.GPU(1)}, m.GPUs)
	assert.Equal(t, [][]topology.P2PStatus{{topology.P2PNotReported, topology.P2PGPUNotSupported},
		{topology.P2PGPUNotSupported, topology.P2PNotReported}}, m.Status)

	f := parseFile(t, testdata.TopologyFile(t, "rtx5090-2gpu-no-p2p.topo-m.txt"))
	assert.Equal(t, "PHB", f.Pairs[0][1].Label())
	require.NoError(t, f.ApplyP2P(m, topology.P2PRead))
	assert.Equal(t, topology.P2PGPUNotSupported, f.Pairs[0][1].P2P.Read)
	assert.Equal(t, topology.P2PNotReported, f.Pairs[0][1].P2P.Write)
	assert.False(t, f.Pairs[0][1].P2P.Usable())

	// The JSON twin carries the same facts (mode rw).
	j := parseFile(t, testdata.TopologyFile(t, "rtx5090-2gpu-no-p2p.json"))
	assert.Equal(t, topology.P2PGPUNotSupported, j.Pairs[1][0].P2P.Read)
	assert.Equal(t, topology.P2PGPUNotSupported, j.Pairs[1][0].P2P.Write)
}

// toSpaces turns a tab-separated output into the space-aligned text a
// copy from a terminal gives.
func toSpaces(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		col := 0
		for _, r := range line {
			if r == '\t' {
				n := 8 - col%8
				b.WriteString(strings.Repeat(" ", n))
				col += n
				continue
			}
			b.WriteRune(r)
			col++
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestParseMatrixSpaces(t *testing.T) {
	for _, name := range []string{"dgx1-v100.topo-m.txt", "a100-pcie-8gpu-nvlink-pairs.topo-m.txt", "raw/dgx-a100-10nic-tabs.txt", "raw/dgx1-p100-soc-4nic-tabs.txt"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(testdata.TopologyFile(t, name))
			require.NoError(t, err)
			tabs, err := topology.ParseMatrix(strings.NewReader(string(b)))
			require.NoError(t, err)
			spaces, err := topology.ParseMatrix(strings.NewReader(toSpaces(string(b))))
			require.NoError(t, err)
			assert.Equal(t, tabs, spaces)
		})
	}
	// CRLF line ends and leading blank lines.
	b, err := os.ReadFile(testdata.TopologyFile(t, "rtx5090-2gpu-no-p2p.topo-p2p.txt"))
	require.NoError(t, err)
	m, err := topology.ParseP2P(strings.NewReader("\r\n\n" + strings.ReplaceAll(toSpaces(string(b)), "\n", "\r\n")))
	require.NoError(t, err)
	assert.Equal(t, topology.P2PGPUNotSupported, m.Status[0][1])
}

// Files saved by Windows tools begin with a UTF-8 byte-order mark: every
// parser skips it, and reads the file as it reads it without one.
func TestParseSkipsBOM(t *testing.T) {
	const bom = "\ufeff"
	read := func(name string) string {
		b, err := os.ReadFile(testdata.TopologyFile(t, name))
		require.NoError(t, err)
		return string(b)
	}
	for _, name := range []string{"dgx1-v100.topo-m.txt", "raw/dgx-a100-10nic-tabs.txt", "dgx1-v100.json"} {
		t.Run(name, func(t *testing.T) {
			parse := topology.ParseMatrix
			if strings.HasSuffix(name, ".json") {
				parse = topology.ParseJSON
			}
			want, err := parse(strings.NewReader(read(name)))
			require.NoError(t, err)
			got, err := parse(strings.NewReader(bom + read(name)))
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
	want, err := topology.ParseP2P(strings.NewReader(read("rtx5090-2gpu-no-p2p.topo-p2p.txt")))
	require.NoError(t, err)
	got, err := topology.ParseP2P(strings.NewReader(bom + read("rtx5090-2gpu-no-p2p.topo-p2p.txt")))
	require.NoError(t, err)
	assert.Equal(t, want, got)
	// The description, which names the GPU model, is read too.
	m, err := topology.ParseMachine([]byte(bom + read("dgx1-v100.json")))
	require.NoError(t, err)
	assert.True(t, m.SpecFound, "the description names the model")
	assert.Equal(t, "V100", m.Spec.Name)
	// Only a leading mark is skipped: one inside the text is a bad label.
	_, err = topology.ParseMatrix(strings.NewReader("\n" + bom + read("dgx1-v100.topo-m.txt")))
	assert.ErrorIs(t, err, topology.ErrUnknownLabel)
}

func TestParseMatrixErrors(t *testing.T) {
	const hdr = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
	tests := []struct {
		name      string
		text      string
		sentinel  error
		line, col int
		cell      string
	}{
		{"empty", "", topology.ErrNoMatrix, 0, 0, ""},
		{"blank", "\n  \n", topology.ErrNoMatrix, 0, 0, ""},
		{"no gpu in header", "\tCPU Affinity\n", topology.ErrNoMatrix, 1, 0, ""},
		{"unknown cell", hdr + "GPU0\t X \tNV1\tFOO\t0-3\t0\nGPU1\tNV1\t X \tSYS\t0-3\t0\nGPU2\tSYS\tSYS\t X \t0-3\t0\n", topology.ErrUnknownLabel, 2, 14, "FOO"},
		{"NV0", hdr + "GPU0\t X \tNV0\tSYS\n", topology.ErrUnknownLabel, 2, 10, "NV0"},
		{"NV with sign", hdr + "GPU0\t X \tNV+1\tSYS\n", topology.ErrUnknownLabel, 2, 10, "NV+1"},
		{"unknown row label", hdr + "GPU0\t X \tNV1\tSYS\nGPU9\tNV1\t X \tSYS\n", topology.ErrUnknownLabel, 3, 1, "GPU9"},
		{"rows out of order", hdr + "GPU0\t X \tNV1\tSYS\nGPU2\tSYS\tSYS\t X \n", topology.ErrRaggedRow, 3, 1, "GPU2"},
		{"short row", hdr + "GPU0\t X \tNV1\n", topology.ErrRaggedRow, 2, 13, ""},
		{"long row", hdr + "GPU0\t X \tNV1\tSYS\t0-3\t0\t7\n", topology.ErrRaggedRow, 2, 24, "7"},
		{"long row spaces", "  GPU0  GPU1  CPU Affinity\nGPU0  X  NV1  0-3  9\n", topology.ErrRaggedRow, 2, 20, "9"},
		{"missing row", hdr + "GPU0\t X \tNV1\tSYS\nGPU1\tNV1\t X \tSYS\n\nLegend:\n", topology.ErrRaggedRow, 4, 0, ""},
		{"extra row", "\tGPU0\nGPU0\t X \nGPU0\t X \n", topology.ErrRaggedRow, 3, 1, "GPU0"},
		{"asymmetric", hdr + "GPU0\t X \tNV1\tSYS\nGPU1\tNV2\t X \tSYS\n", topology.ErrAsymmetric, 3, 6, "NV2"},
		{"X off diagonal", hdr + "GPU0\t X \t X \tSYS\n", topology.ErrAsymmetric, 2, 11, "X"},
		{"diagonal not X", hdr + "GPU0\tSYS\tNV1\tSYS\n", topology.ErrAsymmetric, 2, 6, "SYS"},
		{"empty cell", hdr + "GPU0\t X \t\tSYS\n", topology.ErrRaggedRow, 2, 10, ""},
		{"bad cpu list", hdr + "GPU0\t X \tNV1\tSYS\t3-1\t0\n", topology.ErrBadValue, 2, 18, "3-1"},
		{"bad numa", hdr + "GPU0\t X \tNV1\tSYS\t0-3\tx\n", topology.ErrBadValue, 2, 22, "x"},
		{"duplicate header label", "\tGPU0\tGPU0\n", topology.ErrRaggedRow, 1, 7, "GPU0"},
		{"junk title", "\tGPU0\tCPU Affinity\tFOO\n", topology.ErrUnknownLabel, 1, 20, "FOO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := topology.ParseMatrix(strings.NewReader(tt.text))
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.sentinel)
			var pe *topology.ParseError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "nvidia-smi topo -m", pe.Format)
			assert.Equal(t, tt.line, pe.Line, err.Error())
			assert.Equal(t, tt.col, pe.Col, err.Error())
			assert.Equal(t, tt.cell, pe.Text, err.Error())
			assert.True(t, strings.HasPrefix(err.Error(), "topology: nvidia-smi topo -m"), err.Error())
		})
	}
}

func TestParseP2PErrors(t *testing.T) {
	tests := []struct {
		name      string
		text      string
		sentinel  error
		line, col int
	}{
		{"unknown status", "\tGPU0\tGPU1\nGPU0\tX\tMAYBE\nGPU1\tOK\tX\n", topology.ErrUnknownLabel, 2, 8},
		{"nic label", "\tGPU0\tNIC0\n", topology.ErrUnknownLabel, 1, 7},
		{"ragged", "\tGPU0\tGPU1\nGPU0\tX\n", topology.ErrRaggedRow, 2, 7},
		{"too long", "\tGPU0\nGPU0\tX\tOK\n", topology.ErrRaggedRow, 2, 8},
		{"X off diagonal", "\tGPU0\tGPU1\nGPU0\tX\tX\n", topology.ErrAsymmetric, 2, 8},
		{"diagonal OK", "\tGPU0\tGPU1\nGPU0\tOK\tOK\n", topology.ErrAsymmetric, 2, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := topology.ParseP2P(strings.NewReader(tt.text))
			var pe *topology.ParseError
			require.ErrorAs(t, err, &pe)
			assert.ErrorIs(t, err, tt.sentinel)
			assert.Equal(t, tt.line, pe.Line, err.Error())
			assert.Equal(t, tt.col, pe.Col, err.Error())
		})
	}
	// Asymmetric P2P is allowed: it is a fact per direction.
	m, err := topology.ParseP2P(strings.NewReader("\tGPU0\tGPU1\nGPU0\tX\tOK\nGPU1\tNS\tX\n"))
	require.NoError(t, err)
	assert.Equal(t, topology.P2POK, m.Status[0][1])
	assert.Equal(t, topology.P2PNotSupported, m.Status[1][0])
}

func TestParseJSONErrors(t *testing.T) {
	tests := []struct {
		name      string
		text      string
		sentinel  error
		line, col int
		field     string
	}{
		{"syntax", "{\n \"matrix\": [[\"X\",]]\n}", topology.ErrBadValue, 2, 18, ""},
		{"type", "{\n \"matrix\": 7}", topology.ErrBadValue, 2, 12, ""},
		{"trailing", "{\"matrix\":[[\"X\"]]}\n x", topology.ErrBadValue, 2, 2, ""},
		{"no matrix", "{}", topology.ErrNoMatrix, 0, 0, ""},
		{"empty matrix", `{"matrix": []}`, topology.ErrNoMatrix, 0, 0, ""},
		{"ragged", `{"matrix":[["X","NV1"],["NV1"]]}`, topology.ErrRaggedRow, 0, 0, "matrix[1]"},
		{"unknown", `{"matrix":[["X","NVX"],["NV1","X"]]}`, topology.ErrUnknownLabel, 0, 0, "matrix[0][1]"},
		{"asymmetric", `{"matrix":[["X","NV1"],["NV2","X"]]}`, topology.ErrAsymmetric, 0, 0, "matrix[1][0]"},
		{"gpus", `{"gpus":3,"matrix":[["X"]]}`, topology.ErrRaggedRow, 0, 0, "gpus"},
		{"numa", `{"matrix":[["X"]],"numa":[-1]}`, topology.ErrBadValue, 0, 0, "numa[0]"},
		{"cpus", `{"matrix":[["X"]],"cpu_affinity":["a"]}`, topology.ErrBadValue, 0, 0, "cpu_affinity[0]"},
		{"p2p mode", `{"matrix":[["X"]],"p2p":{"mode":"q","matrix":[["X"]]}}`, topology.ErrBadValue, 0, 0, "p2p.mode"},
		{"p2p cell", `{"matrix":[["X","PHB"],["PHB","X"]],"p2p":{"mode":"r","matrix":[["X","??"],["OK","X"]]}}`, topology.ErrUnknownLabel, 0, 0, "p2p.matrix[0][1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := topology.ParseJSON(strings.NewReader(tt.text))
			var pe *topology.ParseError
			require.ErrorAs(t, err, &pe)
			assert.ErrorIs(t, err, tt.sentinel)
			assert.Equal(t, tt.line, pe.Line, err.Error())
			assert.Equal(t, tt.col, pe.Col, err.Error())
			assert.Equal(t, tt.field, pe.Field, err.Error())
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	big := strings.Repeat(" ", topology.MaxInputBytes+1)
	_, err := topology.ParseMatrix(strings.NewReader(big))
	assert.ErrorIs(t, err, topology.ErrTooLarge)
	_, err = topology.ParseP2P(strings.NewReader(big))
	assert.ErrorIs(t, err, topology.ErrTooLarge)
	_, err = topology.ParseJSON(strings.NewReader(big))
	assert.ErrorIs(t, err, topology.ErrTooLarge)
	_, err = topology.ParseMatrix(errReader{})
	assert.Error(t, err)
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		bad  bool
	}{
		{"", nil, false},
		{"N/A", nil, false},
		{"1-1", []int{1}, false},
		{"0-2,5", []int{0, 1, 2, 5}, false},
		{"0-11,24-35", append(seq(0, 11), seq(24, 35)...), false},
		{"3-1", nil, true},
		{"1,1", nil, true},
		{"-1", nil, true},
		{"+1", nil, true},
		{"1-", nil, true},
		{"a", nil, true},
		{"0-99999999", nil, true},
		{",", nil, true},
	}
	for _, tt := range tests {
		got, err := topology.ParseCPUList(tt.in)
		if tt.bad {
			assert.ErrorIs(t, err, topology.ErrBadValue, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
}

func TestParseLabels(t *testing.T) {
	for _, tt := range []struct {
		in   string
		kind topology.LinkKind
		n    int
	}{{"X", topology.LinkSelf, 0}, {"NV1", topology.LinkNVLink, 1}, {"NV18", topology.LinkNVLink, 18}, {"PIX", topology.LinkPIX, 0},
		{"PXB", topology.LinkPXB, 0}, {"PHB", topology.LinkPHB, 0}, {"NODE", topology.LinkNODE, 0}, {"SYS", topology.LinkSYS, 0}, {"SOC", topology.LinkSYS, 0}} {
		k, n, err := topology.ParseLinkLabel(tt.in)
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.kind, k, tt.in)
		assert.Equal(t, tt.n, n, tt.in)
	}
	for _, bad := range []string{"", "NV", "NV0", "NV01", "NV65", "nv1", "sys", "N/A", "NV-1"} {
		_, _, err := topology.ParseLinkLabel(bad)
		assert.ErrorIs(t, err, topology.ErrUnknownLabel, bad)
	}
	for _, s := range []string{"OK", "CNS", "GNS", "TNS", "NS", "U", "DIS"} {
		st, err := topology.ParseP2PStatus(s)
		require.NoError(t, err)
		assert.Equal(t, s, st.String())
	}
	_, err := topology.ParseP2PStatus("-")
	assert.ErrorIs(t, err, topology.ErrUnknownLabel)
	for s, c := range map[string]topology.P2PCap{"r": topology.P2PRead, "write": topology.P2PWrite, "n": topology.P2PNVLinkCap, "A": topology.P2PAtomics} {
		got, err := topology.ParseP2PCap(s)
		require.NoError(t, err)
		assert.Equal(t, c, got)
	}
	_, err = topology.ParseP2PCap("p")
	assert.Error(t, err)
	assert.Equal(t, "NV", topology.LinkNVLink.String())
	assert.Equal(t, "none", topology.LinkNone.String())
	assert.Equal(t, "linkkind(99)", topology.LinkKind(99).String())
}

// Every sentinel names its package; a ParseError names it once, before the
// place, and then the cause without the prefix again.
func TestSentinelsNamePackage(t *testing.T) {
	for _, err := range []error{topology.ErrUnknownLabel, topology.ErrRaggedRow, topology.ErrAsymmetric,
		topology.ErrNoMatrix, topology.ErrBadValue, topology.ErrTooLarge, topology.ErrUnknownDevice} {
		assert.True(t, strings.HasPrefix(err.Error(), "topology: "), err.Error())
	}
	pe := &topology.ParseError{Format: "json", Line: 1, Col: 2, Err: fmt.Errorf("%w: CPU list %q", topology.ErrBadValue, "3-1")}
	assert.EqualError(t, pe, `topology: json: line 1, col 2: bad value: CPU list "3-1"`)
	_, err := topology.ParseMatrix(strings.NewReader(""))
	assert.EqualError(t, err, "topology: nvidia-smi topo -m: no matrix: empty input")
	_, err = topology.ParseJSON(strings.NewReader(`{"gpus": 2}`))
	assert.EqualError(t, err, `topology: json: no matrix: the object has no "matrix" field (want one row of topo -m cells per GPU)`)
	_, err = topology.ParseJSON(strings.NewReader(`{"matrix": []}`))
	assert.EqualError(t, err, `topology: json: no matrix: "matrix" is empty (want one row of topo -m cells per GPU)`)
	_, err = topology.ParseP2PCap("q")
	assert.EqualError(t, err, `topology: unknown label "q"`)
	assert.ErrorIs(t, err, topology.ErrUnknownLabel)
}
