package flights

import (
	"bytes"
	_ "embed"

	"github.com/streamdag/streamdag/kvio"
)

//go:embed data/flights-200k.arrow
var sample []byte

// SampleName names the embedded sample in reports and errors.
const SampleName = "flights-200k.arrow (embedded)"

// Sample returns the embedded 200,000-row sample (vega-datasets 3.2.1,
// US BTS on-time data; see data/README.md) as a kvio File over memory.
// Open it with kvio.OpenIPC or kvio.OpenAuto.
func Sample(opts ...kvio.Option) (*kvio.File, error) {
	return kvio.NewFile(SampleName, bytes.NewReader(sample), int64(len(sample)), opts...)
}
