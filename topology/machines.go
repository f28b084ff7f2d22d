package topology

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

//go:embed machines/*.json
var machineFiles embed.FS

// Machines returns the names of the embedded real machines
// (machines/*.json: dgx-a100, dgx1-v100, …), sorted.
func Machines() []string {
	entries, _ := machineFiles.ReadDir("machines")
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Machine is an embedded real machine: its facts, the GPU model its
// description names (SpecFromName; DefaultSpec when it names none), and
// the GPU memory the description gives ("V100-SXM2-16GB"), or 0.
type Machine struct {
	Name        string  // the JSON "name"
	Description string  // the JSON "description", for people
	Facts       Facts   // the devices and pairs the description gives
	Spec        GPUSpec // the GPU model's spec (see SpecFound)
	SpecFound   bool    // the description named a known model
	MemoryBytes int64   // per GPU, from the description; 0 when it gives none
}

var memRE = regexp.MustCompile(`(\d+)\s*GB`)

// LoadMachine returns the embedded machine name (see Machines). An
// unknown name is an error listing the known ones.
func LoadMachine(name string) (Machine, error) {
	b, err := machineFiles.ReadFile(path.Join("machines", name+".json"))
	if err != nil {
		return Machine{}, fmt.Errorf("topology: no machine %q (known: %s)", name, strings.Join(Machines(), ", "))
	}
	m, err := ParseMachine(b)
	if err != nil {
		return Machine{}, fmt.Errorf("topology: machine %s: %w", name, err)
	}
	m.Name = name
	return m, nil
}

// ParseMachine reads a machine description in the JSON form ParseJSON
// takes, as LoadMachine reads an embedded one: the facts, plus the GPU
// model and memory its "description" names (when its "gpu" field does not
// name the model, the description can). Name is the file's "name" field.
// Errors are ParseJSON's.
func ParseMachine(b []byte) (Machine, error) {
	b = bytes.TrimPrefix(b, []byte(bom))
	facts, err := ParseJSON(bytes.NewReader(b))
	if err != nil {
		return Machine{}, err
	}
	var meta struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	_ = json.Unmarshal(b, &meta) // ParseJSON accepted the file
	m := Machine{Name: meta.Name, Description: meta.Description, Facts: facts, Spec: DefaultSpec}
	if s, ok := SpecByName(meta.Description); ok {
		m.Spec, m.SpecFound = s, true
	}
	if sub := memRE.FindStringSubmatch(meta.Description); sub != nil {
		if gb, err := strconv.ParseInt(sub[1], 10, 64); err == nil {
			m.MemoryBytes = gb << 30
		}
	}
	return m, nil
}
