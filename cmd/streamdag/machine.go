package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/streamdag/streamdag/topology"

	"github.com/streamdag/streamdag/internal/cli"
)

// machine is a topology read for the CLI: from "sim:NAME" (an embedded
// real machine, topology.Machines) or a file of `nvidia-smi topo -m` text
// or a JSON description.
type machine struct {
	facts  topology.Facts
	source string            // what was read, for output
	spec   *topology.GPUSpec // the GPU model the source names, if any
	memory int64             // per-GPU memory the source gives, or 0
}

// loadMachine reads spec ("sim:NAME" or a path). Errors name the file (or
// the machine) and, for bad text, the line and column; an unknown NAME is
// a usage error.
func loadMachine(spec string) (machine, error) {
	if name, ok := strings.CutPrefix(spec, "sim:"); ok {
		m, err := topology.LoadMachine(name)
		if err != nil {
			return machine{}, cli.UsageError{Err: err}
		}
		out := machine{facts: m.Facts, source: "sim:" + name + " (" + m.Description + ")", memory: m.MemoryBytes}
		if m.SpecFound {
			out.spec = &m.Spec
		}
		return out, nil
	}
	b, err := os.ReadFile(spec)
	if err != nil {
		return machine{}, err
	}
	var out machine
	// JSON begins with "{", after a UTF-8 byte-order mark when a Windows
	// tool saved the file (the parsers skip it).
	if bytes.HasPrefix(bytes.TrimSpace(bytes.TrimPrefix(b, []byte("\ufeff"))), []byte("{")) {
		// Read as an embedded machine is: the description can name the
		// GPU model and memory.
		var m topology.Machine
		m, err = topology.ParseMachine(b)
		out.facts, out.memory, out.source = m.Facts, m.MemoryBytes, filepath.Base(spec)+" (JSON)"
		if m.SpecFound {
			out.spec = &m.Spec
		}
	} else {
		out.facts, err = topology.ParseMatrix(bytes.NewReader(b))
		out.source = filepath.Base(spec) + " (nvidia-smi topo -m)"
	}
	if err != nil {
		return machine{}, fmt.Errorf("%s: %w", spec, err)
	}
	return out, nil
}
