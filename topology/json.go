package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// jsonTopology is the JSON description (the format of the embedded
// machines/*.json files).
type jsonTopology struct {
	Name        string     `json:"name"`
	GPUs        *int       `json:"gpus"`
	GPU         string     `json:"gpu"`
	Matrix      [][]string `json:"matrix"`
	CPUAffinity []*string  `json:"cpu_affinity"`
	NUMA        []*int     `json:"numa"`
	P2P         *struct {
		Mode   string     `json:"mode"`
		Matrix [][]string `json:"matrix"`
	} `json:"p2p"`
}

// ParseJSON reads a JSON description of a machine:
//
//	{"name": "dgx1-v100", "gpus": 8,
//	 "gpu": "V100",                       // optional: the GPU model, for every GPU
//	 "matrix": [["X","NV1",…], …],         // the cells of nvidia-smi topo -m, GPUs only
//	 "cpu_affinity": ["0-11,24-35", null, …],  // optional
//	 "numa": [0, 1, null, …],                   // optional; null or absent = unknown
//	 "p2p": {"mode": "rw", "matrix": [["X","GNS"], …]}}  // optional; mode: letters of r, w, n, a
//
// Other fields (description, source, notes, …) are ignored, and so is a
// leading UTF-8 byte-order mark. GPU i gets
// ID gpu<i>. Syntax and type errors are *ParseError with Line and Col;
// a bad value is a *ParseError whose Field names it ("matrix[2][3]")
// with Line and Col 0, wrapping ErrUnknownLabel, ErrRaggedRow,
// ErrAsymmetric or ErrBadValue as for ParseMatrix; a matrix absent (or
// null) or empty is one wrapping ErrNoMatrix, with no Field or place. It
// never panics.
func ParseJSON(r io.Reader) (Facts, error) {
	text, err := readAll(r, formatJSON)
	if err != nil {
		return Facts{}, err
	}
	var j jsonTopology
	dec := json.NewDecoder(strings.NewReader(text))
	if err := dec.Decode(&j); err != nil {
		var off int64 = -1
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			off = se.Offset
		case errors.As(err, &te):
			off = te.Offset
		}
		line, col := 0, 0
		if off > 0 {
			// Offset counts the bytes read: the last one is at fault.
			line, col = lineCol(text, off-1)
		}
		return Facts{}, &ParseError{Format: formatJSON, Line: line, Col: col, Err: fmt.Errorf("%w: %v", ErrBadValue, err)}
	}
	if rest := bytes.TrimSpace([]byte(text[dec.InputOffset():])); len(rest) > 0 {
		line, col := lineCol(text, dec.InputOffset()+int64(bytes.Index([]byte(text[dec.InputOffset():]), rest[:1])))
		return Facts{}, &ParseError{Format: formatJSON, Line: line, Col: col, Err: fmt.Errorf("%w: data after the JSON object", ErrBadValue)}
	}
	ferr := func(field, txt string, err error) error {
		return &ParseError{Format: formatJSON, Field: field, Text: txt, Err: err}
	}
	n := len(j.Matrix)
	if n == 0 {
		what := `the object has no "matrix" field`
		if j.Matrix != nil {
			what = `"matrix" is empty`
		}
		return Facts{}, ferr("", "", fmt.Errorf("%w: %s (want one row of topo -m cells per GPU)", ErrNoMatrix, what))
	}
	if j.GPUs != nil && *j.GPUs != n {
		return Facts{}, ferr("gpus", fmt.Sprint(*j.GPUs), fmt.Errorf("%w: gpus is %d but the matrix has %d rows", ErrRaggedRow, *j.GPUs, n))
	}
	if j.CPUAffinity != nil && len(j.CPUAffinity) != n {
		return Facts{}, ferr("cpu_affinity", "", fmt.Errorf("%w: %d entries for %d GPUs", ErrRaggedRow, len(j.CPUAffinity), n))
	}
	if j.NUMA != nil && len(j.NUMA) != n {
		return Facts{}, ferr("numa", "", fmt.Errorf("%w: %d entries for %d GPUs", ErrRaggedRow, len(j.NUMA), n))
	}
	f := Facts{GPUs: make([]DeviceFacts, n), Pairs: make([][]Pair, n)}
	for i := range n {
		d := DeviceFacts{ID: GPU(i), Name: j.GPU, NUMANode: -1}
		if j.CPUAffinity != nil && j.CPUAffinity[i] != nil {
			cpus, err := ParseCPUList(*j.CPUAffinity[i])
			if err != nil {
				return Facts{}, ferr(fmt.Sprintf("cpu_affinity[%d]", i), *j.CPUAffinity[i], err)
			}
			d.CPUAffinity = cpus
		}
		if j.NUMA != nil && j.NUMA[i] != nil {
			if v := *j.NUMA[i]; v < 0 || v > 1<<16 {
				return Facts{}, ferr(fmt.Sprintf("numa[%d]", i), fmt.Sprint(v), fmt.Errorf("%w: NUMA node %d", ErrBadValue, v))
			}
			d.NUMANode = *j.NUMA[i]
		}
		f.GPUs[i] = d
		if len(j.Matrix[i]) != n {
			return Facts{}, ferr(fmt.Sprintf("matrix[%d]", i), "", fmt.Errorf("%w: %d cells for %d GPUs", ErrRaggedRow, len(j.Matrix[i]), n))
		}
		f.Pairs[i] = make([]Pair, n)
		for k, s := range j.Matrix[i] {
			field := fmt.Sprintf("matrix[%d][%d]", i, k)
			kind, nv, err := ParseLinkLabel(s)
			if err != nil {
				return Facts{}, ferr(field, s, err)
			}
			if (kind == LinkSelf) != (i == k) {
				return Facts{}, ferr(field, s, fmt.Errorf("%w: X only on the diagonal, and only X there", ErrAsymmetric))
			}
			f.Pairs[i][k] = Pair{Kind: kind, NVLinks: nv}
			if k < i && f.Pairs[k][i] != f.Pairs[i][k] {
				return Facts{}, ferr(field, s, fmt.Errorf("%w: matrix[%d][%d] is %s", ErrAsymmetric, k, i, f.Pairs[k][i].Label()))
			}
		}
	}
	if j.P2P != nil {
		var caps []P2PCap
		for _, r := range j.P2P.Mode {
			c, err := ParseP2PCap(string(r))
			if err != nil {
				return Facts{}, ferr("p2p.mode", j.P2P.Mode, fmt.Errorf("%w: p2p mode %q (want letters of r, w, n, a)", ErrBadValue, j.P2P.Mode))
			}
			caps = append(caps, c)
		}
		if len(caps) == 0 {
			return Facts{}, ferr("p2p.mode", "", fmt.Errorf("%w: empty p2p mode", ErrBadValue))
		}
		if len(j.P2P.Matrix) != n {
			return Facts{}, ferr("p2p.matrix", "", fmt.Errorf("%w: %d rows for %d GPUs", ErrRaggedRow, len(j.P2P.Matrix), n))
		}
		m := P2PMatrix{Status: make([][]P2PStatus, n)}
		for i, row := range j.P2P.Matrix {
			m.GPUs = append(m.GPUs, GPU(i))
			if len(row) != n {
				return Facts{}, ferr(fmt.Sprintf("p2p.matrix[%d]", i), "", fmt.Errorf("%w: %d cells for %d GPUs", ErrRaggedRow, len(row), n))
			}
			m.Status[i] = make([]P2PStatus, n)
			for k, s := range row {
				field := fmt.Sprintf("p2p.matrix[%d][%d]", i, k)
				if (s == "X") != (i == k) {
					return Facts{}, ferr(field, s, fmt.Errorf("%w: X only on the diagonal, and only X there", ErrAsymmetric))
				}
				if i == k {
					continue
				}
				st, err := ParseP2PStatus(s)
				if err != nil {
					return Facts{}, ferr(field, s, err)
				}
				m.Status[i][k] = st
			}
		}
		for _, c := range caps {
			if err := f.ApplyP2P(m, c); err != nil {
				return Facts{}, ferr("p2p", "", err)
			}
		}
	}
	return f, nil
}

// lineCol turns a byte offset into a 1-based line and column.
func lineCol(text string, off int64) (int, int) {
	if off < 0 {
		off = 0
	}
	if off > int64(len(text)) {
		off = int64(len(text))
	}
	before := text[:off]
	line := strings.Count(before, "\n") + 1
	col := len(before) - strings.LastIndexByte(before, '\n')
	return line, col
}
