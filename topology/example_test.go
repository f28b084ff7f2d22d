package topology_test

import (
	"fmt"
	"strings"

	"github.com/streamdag/streamdag/topology"
)

// A 4-GPU fragment of a DGX-1 (V100) as `nvidia-smi topo -m` prints it.
const dgx1Fragment = "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n" +
	"GPU0\t X \tNV1\tNV1\tNV2\t0-11,24-35\t0\n" +
	"GPU1\tNV1\t X \tNV2\tSYS\t0-11,24-35\t0\n" +
	"GPU2\tNV1\tNV2\t X \tSYS\t0-11,24-35\t0\n" +
	"GPU3\tNV2\tSYS\tSYS\t X \t12-23,36-47\t1\n"

func Example() {
	facts, err := topology.ParseMatrix(strings.NewReader(dgx1Fragment))
	if err != nil {
		fmt.Println(err)
		return
	}
	v100, _ := topology.SpecByName("V100")
	topo, err := topology.New(facts, topology.WithGPUSpec(v100))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, pair := range [][2]int{{0, 3}, {0, 1}, {1, 3}} {
		src, dst := topology.GPU(pair[0]), topology.GPU(pair[1])
		l, _ := topo.Link(src, dst)
		r, _ := topo.Route(64<<20, src, dst)
		fmt.Printf("%s→%s %s p2p=%v %.0f GB/s route=%s %v %v\n", src, dst, l.Label(), l.Direct,
			l.BandwidthBps/1e9, r.Kind, r.Path, r.Cost.Round(1000))
	}
	// Output:
	// gpu0→gpu3 NV2 p2p=true 50 GB/s route=direct [gpu0 gpu3] 1.344ms
	// gpu0→gpu1 NV1 p2p=true 25 GB/s route=direct [gpu0 gpu1] 2.686ms
	// gpu1→gpu3 SYS p2p=false 0 GB/s route=via-gpu [gpu1 gpu0 gpu3] 4.031ms
}

func ExampleParseMatrix_errors() {
	_, err := topology.ParseMatrix(strings.NewReader("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV2\t X \n"))
	fmt.Println(err)
	// Output:
	// topology: nvidia-smi topo -m: line 3, col 6: asymmetric matrix: GPU1→GPU0 is NV2 but GPU0→GPU1 is NV1 (line 2)
}
