package exec

import (
	"bytes"
	"fmt"
	"strings"
)

// MarshalDOT returns the plan in Graphviz DOT: one cluster per device
// ("cluster_cpu", "cluster_gpu0") holding one cluster per stream
// ("cluster_cpu_s0") with that stream's launches as boxes, labelled with
// the kernel name and the launch's position on its stream ("#3 on stream
// 0"), in submission order (the stream's order is drawn as invisible
// edges, so a stream reads top to bottom); copy launches between devices
// as orange arrow shapes; buffers (and their replicas on other devices) as
// ellipses in the cluster of the device they live on (inputs as double
// circles), labelled with their size for raw buffers; solid edges
// buffer→launch for reads and launch→buffer for writes; and one dashed
// edge per event wait, from the launch waited for to the launch that
// waits, labelled "wait sT#N" (stream T's completed count N). Failed
// launches cannot be shown (a plan has not run); see WriteTrace for the
// run. Streams the plan leaves empty are drawn as empty clusters.
//
// Node ids are "k<plan index>" and "b<buffer id>"; labels are escaped.
// The output is deterministic for a given plan and renders with Graphviz
// 2.43 and later (`dot -Tsvg`; it sets newrank, which dot has read since
// 2.30), on any number of devices. It never fails today; the
// error is for future placements that may not be drawable.
func (p *Plan) MarshalDOT() ([]byte, error) {
	var b bytes.Buffer
	g := p.graph
	b.WriteString("digraph plan {\n")
	// newrank ranks the whole graph at once rather than cluster by
	// cluster: Graphviz 2.43's cluster ranking ("trouble in init_rank",
	// lost edges) fails on plans whose copies and waits cross many device
	// clusters, as on 8 GPUs.
	b.WriteString("  graph [rankdir=TB, compound=true, newrank=true, fontname=\"Helvetica\", label=\"" +
		dotLabel(p.String()) + "\", labelloc=t];\n")
	b.WriteString("  node [fontname=\"Helvetica\", fontsize=10];\n")
	b.WriteString("  edge [fontname=\"Helvetica\", fontsize=8];\n")

	// Launches by device and stream, in submission order.
	streams := make([][][]int, len(p.devices)) // device → stream → plan indices
	for d := range streams {
		streams[d] = make([][]int, p.streams[d])
	}
	for i := range p.launches {
		l := &p.launches[i]
		for len(streams[l.Device]) <= l.Stream {
			streams[l.Device] = append(streams[l.Device], nil)
		}
		streams[l.Device][l.Stream] = append(streams[l.Device][l.Stream], i)
	}
	for d, dev := range p.devices {
		fmt.Fprintf(&b, "  subgraph \"cluster_%s\" {\n    label=\"%s\";\n    style=filled; fillcolor=\"#f4f4f4\"; color=\"#888888\";\n", dev, dev)
		for s, idx := range streams[d] {
			fmt.Fprintf(&b, "    subgraph \"cluster_%s_s%d\" {\n      label=\"%s stream %d\";\n      style=\"rounded,filled\"; fillcolor=white; color=\"#4a7ab5\";\n", dev, s, dev, s)
			for _, i := range idx {
				l := &p.launches[i]
				shape, fill := "box", "#dce8f7"
				if l.Copy != nil {
					shape, fill = "cds", "#fdebd0"
				}
				fmt.Fprintf(&b, "      k%d [shape=%s, style=filled, fillcolor=\"%s\", label=\"%s\\n#%d on stream %d\"];\n",
					i, shape, fill, dotLabel(l.Name), l.Seq, l.Stream)
			}
			for j := 1; j < len(idx); j++ {
				fmt.Fprintf(&b, "      k%d -> k%d [style=invis, weight=10];\n", idx[j-1], idx[j])
			}
			b.WriteString("    }\n")
		}
		for id, bd := range p.bufs {
			if bd.Device != d {
				continue
			}
			shape := "ellipse"
			if id < g.NumBuffers() && g.Buffer(bd.Of).Input {
				shape = "doublecircle"
			}
			label := dotLabel(bd.Name)
			if !bd.Value {
				label += fmt.Sprintf("\\n%d B", bd.SizeBytes)
			}
			fmt.Fprintf(&b, "    b%d [shape=%s, label=\"%s\"];\n", id, shape, label)
		}
		b.WriteString("  }\n")
	}

	// Data edges, in plan order: reads then writes.
	for i := range p.launches {
		l := &p.launches[i]
		seen := map[string]bool{}
		for _, r := range l.Reads {
			e := fmt.Sprintf("  b%d -> k%d;\n", r.Buffer, i)
			if !seen[e] {
				seen[e] = true
				b.WriteString(e)
			}
		}
		for _, w := range l.Writes {
			e := fmt.Sprintf("  k%d -> b%d;\n", i, w.Buffer)
			if !seen[e] {
				seen[e] = true
				b.WriteString(e)
			}
		}
	}
	// Event waits.
	for i := range p.launches {
		for _, w := range p.launches[i].Waits {
			fmt.Fprintf(&b, "  k%d -> k%d [style=dashed, color=\"#c0392b\", fontcolor=\"#c0392b\", constraint=false, label=\"wait s%d#%d\"];\n",
				w.Launch, i, w.Stream, w.Seq)
		}
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// dotLabel escapes s for the inside of a quoted DOT string.
var dotLabel = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace
