package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
)

// The values of run flights --device.
const (
	deviceAuto   = "auto"
	deviceCPU    = "cpu"
	deviceOpenCL = "opencl"
)

// deviceChoice is what --device resolved to: the CPU device alone, or the
// CPU device plus OpenCL device number index of opencl.Devices (name
// its name), and why.
type deviceChoice struct {
	openCL bool
	index  int
	name   string
	why    string
}

// chooseDevice resolves --device flag from the OpenCL devices found
// (infos, or the error that says why there are none). auto takes the
// first OpenCL device of type GPU, else the CPU device alone (PoCL's
// OpenCL device is the CPU itself: the Go kernels run there directly);
// opencl takes the first GPU, else the first device of any type, and is
// an error naming what was looked for when there is none.
func chooseDevice(flag string, infos []opencl.DeviceInfo, listErr error) (deviceChoice, error) {
	gpu := slices.IndexFunc(infos, func(d opencl.DeviceInfo) bool { return d.Type&opencl.TypeGPU != 0 && d.Available })
	found := func() string {
		if listErr != nil {
			return listErr.Error()
		}
		if len(infos) == 0 {
			return "no OpenCL device"
		}
		var ds []string
		for _, d := range infos {
			ds = append(ds, fmt.Sprintf("%s (%s, %s)", d.Name, d.Type, d.Platform))
		}
		return "found " + strings.Join(ds, ", ")
	}
	switch flag {
	case deviceCPU:
		return deviceChoice{why: "--device cpu"}, nil
	case deviceAuto:
		if gpu < 0 {
			return deviceChoice{why: "--device auto: no OpenCL GPU (" + found() + "), so every kernel runs on the CPU device"}, nil
		}
		d := infos[gpu]
		return deviceChoice{openCL: true, index: gpu, name: d.Name,
			why: fmt.Sprintf("--device auto: OpenCL GPU %s (%s)", d.Name, d.Platform)}, nil
	case deviceOpenCL:
		i := gpu
		if i < 0 {
			i = slices.IndexFunc(infos, func(d opencl.DeviceInfo) bool { return d.Available })
		}
		if i < 0 {
			return deviceChoice{}, fmt.Errorf("--device opencl: no OpenCL device: looked for libOpenCL.so.1 and the platforms its ICD loader lists (/etc/OpenCL/vendors): %s; "+
				"install one, e.g. apt-get install pocl-opencl-icd ocl-icd-libopencl1 (PoCL: OpenCL on the CPU cores), or use --device cpu", found())
		}
		d := infos[i]
		return deviceChoice{openCL: true, index: i, name: d.Name,
			why: fmt.Sprintf("--device opencl: %s (%s, %s) beside the CPU device", d.Name, d.Type, d.Platform)}, nil
	}
	return deviceChoice{}, usagef("--device %s: want cpu, opencl or auto", flag)
}

// openCLInfos lists the OpenCL devices' descriptions.
func openCLInfos() ([]opencl.DeviceInfo, error) {
	ds, err := opencl.Devices()
	if err != nil {
		return nil, err
	}
	infos := make([]opencl.DeviceInfo, len(ds))
	for i, d := range ds {
		infos[i] = d.Info()
	}
	return infos, nil
}

// openOpenCL opens the OpenCL device choice names (its index in
// opencl.Devices) as the gpu.Device opencl0 with streams streams.
// closeCL closes it.
func openOpenCL(choice deviceChoice, streams int) (dev gpu.Device, closeCL func(), err error) {
	ds, err := opencl.Devices()
	if err != nil {
		return nil, nil, fmt.Errorf("--device: %w", err)
	}
	if choice.index >= len(ds) {
		return nil, nil, fmt.Errorf("--device: OpenCL device %d (%s) is gone: %d devices now", choice.index, choice.name, len(ds))
	}
	d, err := opencl.NewDevice(ds[choice.index], min(streams, opencl.MaxStreams))
	if err != nil {
		return nil, nil, fmt.Errorf("--device: %s: %w", choice.name, err)
	}
	return d, func() { _ = d.Close() }, nil
}

// deviceSummary is the run summary's line on a run with an OpenCL
// device: which kernels ran where, and the copies between the devices.
func deviceSummary(rep *exec.Report) string {
	n, bytes := copiedBytes(rep)
	return fmt.Sprintf("kernels: %s; %s between the devices, %.1f MB",
		kernelsByDevice(rep), plural(n, "copy"), float64(bytes)/1e6)
}

// kernelsByDevice says which kernels ran on which device, one entry per
// device in the report's order: "opencl0: filter ×22, partial ×22". A
// kernel name's partition index is dropped ("filter[3]" counts as filter).
func kernelsByDevice(rep *exec.Report) string {
	type count struct {
		name string
		n    int
	}
	byDev := map[string][]count{}
	var devs []string
	for _, l := range rep.Launches() {
		if l.Status != exec.StatusOK || strings.HasPrefix(l.Kernel, "copy ") {
			continue
		}
		d := l.Device.String()
		if _, ok := byDev[d]; !ok {
			devs = append(devs, d)
		}
		name, _, _ := strings.Cut(l.Kernel, "[")
		cs := byDev[d]
		if i := slices.IndexFunc(cs, func(c count) bool { return c.name == name }); i >= 0 {
			cs[i].n++
		} else {
			cs = append(cs, count{name, 1})
		}
		byDev[d] = cs
	}
	parts := make([]string, 0, len(devs))
	for _, d := range devs {
		var ks []string
		for _, c := range byDev[d] {
			if c.n == 1 {
				ks = append(ks, c.name)
			} else {
				ks = append(ks, fmt.Sprintf("%s ×%d", c.name, c.n))
			}
		}
		parts = append(parts, d+": "+strings.Join(ks, ", "))
	}
	return strings.Join(parts, "; ")
}

// copiedBytes sums the bytes the run's copies moved and counts them.
func copiedBytes(rep *exec.Report) (n int, bytes int64) {
	for _, c := range rep.Copies {
		n++
		bytes += c.Bytes
	}
	return n, bytes
}
