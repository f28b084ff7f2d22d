package topology

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Sentinel errors wrapped by *ParseError (test with errors.Is).
var (
	// ErrUnknownLabel: a cell, row label or column label is not one the
	// format allows.
	ErrUnknownLabel = errors.New("topology: unknown label")
	// ErrRaggedRow: a row has too few or too many cells, or rows are
	// missing or extra.
	ErrRaggedRow = errors.New("topology: ragged row")
	// ErrAsymmetric: the link kinds of (i, j) and (j, i) differ, or X is
	// off the diagonal, or the diagonal is not X.
	ErrAsymmetric = errors.New("topology: asymmetric matrix")
	// ErrNoMatrix: the text holds no header naming a GPU, or a JSON
	// description no matrix.
	ErrNoMatrix = errors.New("topology: no matrix")
	// ErrBadValue: an affinity cell, JSON value or count is malformed.
	ErrBadValue = errors.New("topology: bad value")
	// ErrTooLarge: the input exceeds MaxInputBytes.
	ErrTooLarge = errors.New("topology: input too large")
)

// MaxInputBytes bounds the text or JSON a parser reads (1 MiB; a real
// `nvidia-smi topo -m` of a 16-GPU, 16-NIC host is under 10 KiB).
const MaxInputBytes = 1 << 20

// ParseError reports bad input and where it is.
type ParseError struct {
	// Format is "nvidia-smi topo -m", "nvidia-smi topo -p2p" or "json".
	Format string
	// Line and Col are 1-based; Col counts bytes from the start of the
	// line (a tab is one byte), on line 1 from after a leading UTF-8
	// byte-order mark, which every parser skips. Both are 0 when the place is unknown, and
	// Col is 0 when the whole line is at fault. For a JSON value error
	// they point at the start of the document and Field names the value.
	Line, Col int
	// Field names the JSON value at fault ("matrix[2][3]"), else "".
	Field string
	// Text is the offending cell or value, "" when none.
	Text string
	// Err is the cause; it wraps one of the Err* sentinels of this package.
	Err error
}

// Error returns "topology: nvidia-smi topo -m: line 3, col 12: …": the
// place, then Err's text without its own "topology: " prefix.
func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString("topology: ")
	b.WriteString(e.Format)
	if e.Line > 0 {
		fmt.Fprintf(&b, ": line %d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ", col %d", e.Col)
		}
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": ")
	b.WriteString(strings.TrimPrefix(e.Err.Error(), "topology: "))
	return b.String()
}

// Unwrap returns Err.
func (e *ParseError) Unwrap() error { return e.Err }

// Format names used in ParseError.Format.
const (
	formatTopoM = "nvidia-smi topo -m"
	formatP2P   = "nvidia-smi topo -p2p"
	formatJSON  = "json"
)

// bom is the UTF-8 byte-order mark that files saved by Windows tools
// begin with.
const bom = "\ufeff"

// readAll reads the input of a parser, without a leading bom: lines and
// columns count from after it.
func readAll(r io.Reader, format string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxInputBytes+1))
	if err != nil {
		return "", fmt.Errorf("topology: %s: read: %w", format, err)
	}
	if len(b) > MaxInputBytes {
		return "", &ParseError{Format: format, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxInputBytes)}
	}
	return strings.TrimPrefix(string(b), bom), nil
}

// cell is one field of a line with its 1-based byte column.
type cell struct {
	text string
	col  int
}

// splitCells splits a line into trimmed cells. A line holding a tab is
// split at each tab (so empty cells are kept: nvidia-smi leaves affinity
// cells empty); a line without a tab at each run of spaces.
func splitCells(line string) []cell {
	var out []cell
	if strings.Contains(line, "\t") {
		start := 0
		for i := 0; i <= len(line); i++ {
			if i == len(line) || line[i] == '\t' {
				raw := line[start:i]
				lead := len(raw) - len(strings.TrimLeft(raw, " "))
				out = append(out, cell{text: strings.TrimSpace(raw), col: start + lead + 1})
				start = i + 1
			}
		}
		return out
	}
	for i := 0; i < len(line); {
		if line[i] == ' ' {
			i++
			continue
		}
		j := i
		for j < len(line) && line[j] != ' ' {
			j++
		}
		out = append(out, cell{text: line[i:j], col: i + 1})
		i = j
	}
	return out
}

// affinityTitles are the column titles after the matrix, as nvidia-smi
// prints them.
var affinityTitles = []string{"CPU Affinity", "NUMA Affinity", "GPU NUMA ID"}

// splitLabels splits a header field into device labels. Pasted outputs lose
// tabs ("GPU0GPU1…GPU7mlx5_0"), so GPU# and NIC# are cut out wherever they
// occur and what lies between is a label of its own.
var labelRE = regexp.MustCompile(`(GPU|NIC)[0-9]+`)

func splitLabels(c cell) []cell {
	var out []cell
	s, off := c.text, 0
	for s != "" {
		loc := labelRE.FindStringIndex(s)
		if loc == nil {
			out = append(out, cell{s, c.col + off})
			break
		}
		if loc[0] > 0 {
			out = append(out, cell{s[:loc[0]], c.col + off})
		}
		out = append(out, cell{s[loc[0]:loc[1]], c.col + off + loc[0]})
		s, off = s[loc[1]:], off+loc[1]
	}
	return out
}

var nicNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.:-]*$`)

// gpuLabel returns N for "GPUN" (N without sign or leading zero, < 1<<20).
func gpuLabel(s string) (int, bool) {
	rest, ok := strings.CutPrefix(s, "GPU")
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') || len(rest) > 7 {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}

// grid is the shape shared by `topo -m` and `topo -p2p`: a header of device
// labels (and, for topo -m, affinity titles), one row per label.
type grid struct {
	labels []cell   // column labels, in order
	titles []string // affinity titles after the labels
	rows   []gridRow
	// lines after the matrix (legend), 1-based line numbers
	rest     []string
	restLine int
	// missing is the error for rows missing at the end, nil when none.
	missing error
}

type gridRow struct {
	line     int
	label    cell
	cells    []cell // len(labels) matrix cells
	trailing []cell // affinity cells, aligned to titles ("" when absent)
	endCol   int
}

func parseGrid(text, format string, withTitles bool) (*grid, error) {
	perr := func(line, col int, txt string, err error) error {
		return &ParseError{Format: format, Line: line, Col: col, Text: txt, Err: err}
	}
	lines := strings.Split(strings.ReplaceAll(text, "\r", ""), "\n")
	i := 0
	for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
		i++
	}
	if i == len(lines) {
		return nil, perr(0, 0, "", fmt.Errorf("%w: empty input", ErrNoMatrix))
	}
	g := &grid{}
	header, hline := lines[i], i+1
	labelPart := header
	if withTitles {
		// Cut the titles off first: with spaces for separators they hold
		// spaces themselves.
		first := len(header)
		type at struct {
			pos   int
			title string
		}
		var found []at
		for _, t := range affinityTitles {
			if p := strings.Index(header, t); p >= 0 {
				found = append(found, at{p, t})
				first = min(first, p)
			}
		}
		for len(found) > 0 { // order of appearance
			k := 0
			for j := range found {
				if found[j].pos < found[k].pos {
					k = j
				}
			}
			g.titles = append(g.titles, found[k].title)
			found = append(found[:k], found[k+1:]...)
		}
		labelPart = header[:first]
		if rest := header[first:]; strings.TrimSpace(rest) != "" {
			left := rest
			for _, t := range g.titles {
				left = strings.Replace(left, t, "", 1)
			}
			if s := strings.TrimSpace(left); s != "" {
				return nil, perr(hline, first+strings.Index(rest, s)+1, s, fmt.Errorf("%w %q in the header", ErrUnknownLabel, s))
			}
		}
	}
	seen := map[string]bool{}
	nGPU := 0
	for _, c := range splitCells(labelPart) {
		if c.text == "" {
			continue
		}
		for _, l := range splitLabels(c) {
			if _, ok := gpuLabel(l.text); ok {
				nGPU++
			} else if !nicNameRE.MatchString(l.text) || !withTitles {
				return nil, perr(hline, l.col, l.text, fmt.Errorf("%w %q in the header", ErrUnknownLabel, l.text))
			}
			if seen[l.text] {
				return nil, perr(hline, l.col, l.text, fmt.Errorf("%w: label %q twice in the header", ErrRaggedRow, l.text))
			}
			seen[l.text] = true
			g.labels = append(g.labels, l)
		}
	}
	if nGPU == 0 {
		return nil, perr(hline, 0, "", fmt.Errorf("%w: the first line names no GPU (want a header like \"GPU0 GPU1 …\")", ErrNoMatrix))
	}
	n := len(g.labels)
	i++
	for ; i < len(lines); i++ {
		line := lines[i]
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "Legend") {
			break
		}
		lineNo := i + 1
		cells := splitCells(line)
		// Drop empty cells before the label (" GPU0\t…" in topo -p2p).
		for len(cells) > 0 && cells[0].text == "" {
			cells = cells[1:]
		}
		label := cells[0]
		if len(g.rows) >= n {
			return nil, perr(lineNo, label.col, label.text, fmt.Errorf("%w: more rows than the %d header labels", ErrRaggedRow, n))
		}
		want := g.labels[len(g.rows)]
		if label.text != want.text {
			if !seen[label.text] {
				return nil, perr(lineNo, label.col, label.text, fmt.Errorf("%w %q as a row label", ErrUnknownLabel, label.text))
			}
			return nil, perr(lineNo, label.col, label.text, fmt.Errorf("%w: row %q where the header order wants %q", ErrRaggedRow, label.text, want.text))
		}
		if len(cells)-1 < n {
			return nil, perr(lineNo, len(line)+1, "", fmt.Errorf("%w: row %s has %d cells, want %d", ErrRaggedRow, label.text, len(cells)-1, n))
		}
		r := gridRow{line: lineNo, label: label, cells: cells[1 : 1+n], endCol: len(line) + 1}
		for _, c := range r.cells {
			if c.text == "" {
				return nil, perr(lineNo, c.col, "", fmt.Errorf("%w: row %s has an empty cell", ErrRaggedRow, label.text))
			}
		}
		tr := cells[1+n:]
		tabbed := strings.Contains(line, "\t")
		if tabbed && len(tr) > len(g.titles) {
			// nvidia-smi prints an extra tab before "GPU NUMA ID" values:
			// drop the last empty cell.
			for k := len(tr) - 1; k >= 0 && len(tr) > len(g.titles); k-- {
				if tr[k].text == "" {
					tr = append(tr[:k:k], tr[k+1:]...)
				}
			}
		}
		if !tabbed {
			// Spaces cannot show an empty cell: values fill titles in order.
			tr = deleteEmpty(tr)
		}
		if len(tr) > len(g.titles) {
			extra := tr[len(g.titles)]
			return nil, perr(lineNo, extra.col, extra.text, fmt.Errorf("%w: row %s has %d cells after the matrix, the header has %d titles", ErrRaggedRow, label.text, len(tr), len(g.titles)))
		}
		r.trailing = tr
		g.rows = append(g.rows, r)
	}
	if len(g.rows) < n {
		// Reported after the cells of the rows present: errors come in
		// text order.
		g.missing = perr(min(i+1, len(lines)), 0, "", fmt.Errorf("%w: %d rows, want one per header label (%d); missing %s", ErrRaggedRow, len(g.rows), n, g.labels[len(g.rows)].text))
	}
	g.rest, g.restLine = lines[i:], i+1
	return g, nil
}

func deleteEmpty(cs []cell) []cell {
	out := cs[:0:0]
	for _, c := range cs {
		if c.text != "" {
			out = append(out, c)
		}
	}
	return out
}

// ParseCPUList parses a Linux CPU list such as "0-11,24-35" or "1-1" into
// ascending CPU numbers. "" and "N/A" give nil. A malformed list, a range
// running backwards, or more than 1<<16 CPUs returns an error wrapping
// ErrBadValue.
func ParseCPUList(s string) ([]int, error) {
	if s == "" || s == "N/A" {
		return nil, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || lo == "" || (lo[0] == '+') || (isRange && (hi == "" || hi[0] == '+')) {
			return nil, fmt.Errorf("%w: CPU list %q", ErrBadValue, s)
		}
		if b-a >= 1<<16 || len(out)+(b-a+1) > 1<<16 {
			return nil, fmt.Errorf("%w: CPU list %q names more than %d CPUs", ErrBadValue, s, 1<<16)
		}
		if len(out) > 0 && a <= out[len(out)-1] {
			return nil, fmt.Errorf("%w: CPU list %q is not ascending", ErrBadValue, s)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// Facts are the plain values a Topology is built from (New): what a parser
// read or what the GPU inventory knows. Build them by hand, with
// ParseMatrix, ParseJSON, or from gpu/nvml's Inventory (its Facts method
// does; this package imports nothing from it).
type Facts struct {
	// GPUs in order, each with ID topology.GPU(n); Name, compute
	// capability, NUMA node and CPU affinity when known (NUMANode -1 when
	// not). `nvidia-smi topo -m` gives no name: Name is "".
	GPUs []DeviceFacts
	// Pairs[i][j] is the connection from GPUs[i] to GPUs[j]; the diagonal
	// is ignored. nil means nothing is known about any pair (every copy
	// then goes through the host).
	Pairs [][]Pair
	// NICs are the network devices the text listed, in order.
	NICs []NIC
	// Host describes the host CPU device; the zero value means "unknown"
	// and New uses a plain "host CPU" entry.
	Host DeviceFacts
}

// NIC is a network device listed by `nvidia-smi topo -m` (for GPUDirect
// RDMA placement, later).
type NIC struct {
	Label string // the label in the matrix: "NIC0", "mlx5_0"
	Name  string // the name from the NIC Legend ("mlx5_0"), else Label
	// GPULinks[i] is the link kind between the NIC and Facts.GPUs[i].
	GPULinks []LinkKind
	// CPUAffinity is the CPU list from its row, nil when empty.
	CPUAffinity []int
}

// ParseMatrix parses the text of `nvidia-smi topo -m` (or the older
// `nvidia-smi topo --matrix`) as real machines print it: cells split by
// tabs or by spaces, NIC rows and columns (NIC0…, mlx5_0…) mixed with the
// GPU ones, the CPU Affinity, NUMA Affinity and GPU NUMA ID columns (any
// subset), SOC for SYS (old drivers), a legend and a NIC legend after the
// matrix, a header whose tabs were lost when pasted, a leading UTF-8
// byte-order mark (files saved by Windows tools). Blank lines before
// the header are skipped; the matrix ends at a blank line, a "Legend" line
// or the end of input.
//
// It returns Facts with one DeviceFacts per GPU (ID from the label, GPU3 →
// gpu3; Name ""; NUMANode from NUMA Affinity or -1; CPUAffinity) and the
// pairwise kinds; P2P is not reported (see ParseP2P and Facts.ApplyP2P).
//
// Errors are *ParseError with Line and Col: ErrNoMatrix, ErrUnknownLabel
// (a cell other than X, NV#, PIX, PXB, PHB, NODE, SYS, SOC; an unexpected
// row label), ErrRaggedRow (too few or too many cells or rows),
// ErrAsymmetric (kind(i,j) ≠ kind(j,i); X off the diagonal), ErrBadValue
// (an affinity cell), ErrTooLarge. It never panics.
func ParseMatrix(r io.Reader) (Facts, error) {
	text, err := readAll(r, formatTopoM)
	if err != nil {
		return Facts{}, err
	}
	g, err := parseGrid(text, formatTopoM, true)
	if err != nil {
		return Facts{}, err
	}
	perr := func(line, col int, txt string, err error) error {
		return &ParseError{Format: formatTopoM, Line: line, Col: col, Text: txt, Err: err}
	}
	n := len(g.labels)
	kinds := make([][]Pair, n)
	for i, row := range g.rows {
		kinds[i] = make([]Pair, n)
		for j, c := range row.cells {
			k, nv, err := ParseLinkLabel(c.text)
			if err != nil {
				return Facts{}, perr(row.line, c.col, c.text, fmt.Errorf("%w (want X, NV#, PIX, PXB, PHB, NODE, SYS or SOC)", err))
			}
			if (k == LinkSelf) != (i == j) {
				if i == j {
					return Facts{}, perr(row.line, c.col, c.text, fmt.Errorf("%w: %s with itself is %q, want X", ErrAsymmetric, row.label.text, c.text))
				}
				return Facts{}, perr(row.line, c.col, c.text, fmt.Errorf("%w: X between %s and %s off the diagonal", ErrAsymmetric, row.label.text, g.labels[j].text))
			}
			kinds[i][j] = Pair{Kind: k, NVLinks: nv}
			if j < i && kinds[j][i] != kinds[i][j] {
				return Facts{}, perr(row.line, c.col, c.text, fmt.Errorf("%w: %s→%s is %s but %s→%s is %s (line %d)", ErrAsymmetric,
					row.label.text, g.labels[j].text, kinds[i][j].Label(), g.labels[j].text, row.label.text, kinds[j][i].Label(), g.rows[j].line))
			}
		}
	}
	var f Facts
	var gpuPos []int
	for i, row := range g.rows {
		l := g.labels[i]
		var vals [3]cell // CPU Affinity, NUMA Affinity, GPU NUMA ID
		for k, c := range row.trailing {
			vals[slices.Index(affinityTitles, g.titles[k])] = c
		}
		cpus, err := ParseCPUList(vals[0].text)
		if err != nil {
			return Facts{}, perr(row.line, vals[0].col, vals[0].text, err)
		}
		numa := -1
		if v := vals[1].text; v != "" && v != "N/A" {
			nn, err := strconv.Atoi(v)
			if err != nil || nn < 0 || nn > 1<<16 || strconv.Itoa(nn) != v {
				return Facts{}, perr(row.line, vals[1].col, v, fmt.Errorf("%w: NUMA Affinity %q", ErrBadValue, v))
			}
			numa = nn
		}
		if v := vals[2].text; v != "" && v != "N/A" {
			if nn, err := strconv.Atoi(v); err != nil || nn < 0 {
				return Facts{}, perr(row.line, vals[2].col, v, fmt.Errorf("%w: GPU NUMA ID %q", ErrBadValue, v))
			}
		}
		if idx, ok := gpuLabel(l.text); ok {
			gpuPos = append(gpuPos, i)
			f.GPUs = append(f.GPUs, DeviceFacts{ID: GPU(idx), NUMANode: numa, CPUAffinity: cpus})
			continue
		}
		f.NICs = append(f.NICs, NIC{Label: l.text, Name: l.text, CPUAffinity: cpus})
	}
	if g.missing != nil {
		return Facts{}, g.missing
	}
	f.Pairs = make([][]Pair, len(gpuPos))
	for a, i := range gpuPos {
		f.Pairs[a] = make([]Pair, len(gpuPos))
		for b, j := range gpuPos {
			f.Pairs[a][b] = kinds[i][j]
		}
	}
	nic := 0
	for i, l := range g.labels {
		if _, ok := gpuLabel(l.text); ok {
			continue
		}
		for _, j := range gpuPos {
			f.NICs[nic].GPULinks = append(f.NICs[nic].GPULinks, kinds[i][j].Kind)
		}
		nic++
	}
	// NIC Legend: "  NIC0: mlx5_0".
	inNICLegend := false
	for _, line := range g.rest {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "NIC Legend") {
			inNICLegend = true
			continue
		}
		if !inNICLegend {
			continue
		}
		if lab, name, ok := strings.Cut(t, ":"); ok {
			for k := range f.NICs {
				if f.NICs[k].Label == strings.TrimSpace(lab) && strings.TrimSpace(name) != "" {
					f.NICs[k].Name = strings.TrimSpace(name)
				}
			}
		}
	}
	return f, nil
}

// P2PMatrix is the parsed text of `nvidia-smi topo -p2p <cap>`.
type P2PMatrix struct {
	// GPUs in the order of the matrix.
	GPUs []DeviceID
	// Status[i][j] is the status of GPUs[i]'s access to GPUs[j];
	// the diagonal is P2PNotReported (X). The matrix may be asymmetric:
	// P2P is a fact per direction.
	Status [][]P2PStatus
}

// ParseP2P parses the text of `nvidia-smi topo -p2p r` (or w, n, a, p):
// a header of GPU labels, one row per GPU (rows may start with a space),
// cells X on the diagonal and OK, CNS, GNS, TNS, NS or U elsewhere, then
// an optional legend. Tabs or spaces separate cells; a leading UTF-8
// byte-order mark is skipped. The text does not say
// which capability was queried; the caller knows (Facts.ApplyP2P).
//
// Errors are *ParseError with Line and Col: ErrNoMatrix, ErrUnknownLabel,
// ErrRaggedRow, ErrAsymmetric (X off the diagonal or a diagonal other than
// X), ErrTooLarge. It never panics.
func ParseP2P(r io.Reader) (P2PMatrix, error) {
	text, err := readAll(r, formatP2P)
	if err != nil {
		return P2PMatrix{}, err
	}
	g, err := parseGrid(text, formatP2P, false)
	if err != nil {
		return P2PMatrix{}, err
	}
	n := len(g.labels)
	m := P2PMatrix{Status: make([][]P2PStatus, n)}
	for _, l := range g.labels {
		idx, _ := gpuLabel(l.text)
		m.GPUs = append(m.GPUs, GPU(idx))
	}
	for i, row := range g.rows {
		m.Status[i] = make([]P2PStatus, n)
		if len(row.trailing) > 0 {
			c := row.trailing[0]
			return P2PMatrix{}, &ParseError{Format: formatP2P, Line: row.line, Col: c.col, Text: c.text, Err: fmt.Errorf("%w: row %s has more than %d cells", ErrRaggedRow, row.label.text, n)}
		}
		for j, c := range row.cells {
			if c.text == "X" {
				if i != j {
					return P2PMatrix{}, &ParseError{Format: formatP2P, Line: row.line, Col: c.col, Text: c.text, Err: fmt.Errorf("%w: X between %s and %s off the diagonal", ErrAsymmetric, row.label.text, g.labels[j].text)}
				}
				continue
			}
			if i == j {
				return P2PMatrix{}, &ParseError{Format: formatP2P, Line: row.line, Col: c.col, Text: c.text, Err: fmt.Errorf("%w: %s with itself is %q, want X", ErrAsymmetric, row.label.text, c.text)}
			}
			s, err := ParseP2PStatus(c.text)
			if err != nil {
				return P2PMatrix{}, &ParseError{Format: formatP2P, Line: row.line, Col: c.col, Text: c.text, Err: fmt.Errorf("%w (want X, OK, CNS, GNS, TNS, NS or U)", err)}
			}
			m.Status[i][j] = s
		}
	}
	if g.missing != nil {
		return P2PMatrix{}, g.missing
	}
	return m, nil
}

// ApplyP2P records capability c of every pair of m in f: the status of
// m.GPUs[i]'s access to m.GPUs[j] goes to the matching pair of f.GPUs.
// Every GPU of m must be in f and vice versa, else it returns an error
// (and leaves f unchanged). When f.Pairs is nil it is allocated (kinds
// LinkNone).
func (f *Facts) ApplyP2P(m P2PMatrix, c P2PCap) error {
	pos := map[DeviceID]int{}
	for i, d := range f.GPUs {
		pos[d.ID] = i
	}
	if len(m.GPUs) != len(f.GPUs) {
		return fmt.Errorf("topology: p2p matrix has %d GPUs, the topology %d", len(m.GPUs), len(f.GPUs))
	}
	idx := make([]int, len(m.GPUs))
	for i, id := range m.GPUs {
		p, ok := pos[id]
		if !ok {
			return fmt.Errorf("topology: p2p matrix names %s, which the topology lacks", id)
		}
		idx[i] = p
	}
	if len(m.Status) != len(m.GPUs) {
		return fmt.Errorf("topology: p2p matrix has %d rows for %d GPUs", len(m.Status), len(m.GPUs))
	}
	for _, row := range m.Status {
		if len(row) != len(m.GPUs) {
			return fmt.Errorf("topology: p2p matrix row has %d cells for %d GPUs", len(row), len(m.GPUs))
		}
	}
	if f.Pairs == nil {
		f.Pairs = make([][]Pair, len(f.GPUs))
		for i := range f.Pairs {
			f.Pairs[i] = make([]Pair, len(f.GPUs))
		}
	}
	if err := f.checkShape(); err != nil {
		return err
	}
	for i, row := range m.Status {
		for j, s := range row {
			if i != j {
				f.Pairs[idx[i]][idx[j]].P2P.Set(c, s)
			}
		}
	}
	return nil
}

func (f *Facts) checkShape() error {
	if f.Pairs == nil {
		return nil
	}
	if len(f.Pairs) != len(f.GPUs) {
		return fmt.Errorf("topology: %d rows of pairs for %d GPUs", len(f.Pairs), len(f.GPUs))
	}
	for i, row := range f.Pairs {
		if len(row) != len(f.GPUs) {
			return fmt.Errorf("topology: pairs row %d has %d entries for %d GPUs", i, len(row), len(f.GPUs))
		}
	}
	return nil
}
