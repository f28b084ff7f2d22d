package shard

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/streamdag/streamdag/lease"
)

// Task is the serializable description of one shard's work: the name of
// the registered Template that rebuilds its graph on the worker, and the
// template's parameters as JSON.
type Task struct {
	Shard    int      // the shard's index, 0 up
	Template string   // a name given to Register
	Params   []byte   // the template's parameters, JSON
	Failed   []string // the errors of the task's failed attempts, first lines, in order
}

// Env is what a Template runs with on a worker: the process's backend
// (OpenBackend), which hands out the device the shard's graph runs on,
// and the number of streams to open on it.
type Env struct {
	Backend *lease.Backend
	Streams int
}

// Template rebuilds and runs one shard's graph from task.Params in env,
// and returns its partial aggregates (every row with Shard task.Shard)
// and its report. A launch failure inside the graph is not an error: it
// is in the Report's Lost. An error fails this attempt of the shard: the
// shard is run again, up to Config.Attempts times, and the last failed
// attempt fails the Beam job.
type Template func(ctx context.Context, env Env, task Task) (Partial, Report, error)

// templates are the registered templates by name.
var templates struct {
	mu sync.RWMutex
	m  map[string]Template
}

// Register makes t the template named name in this process. Every
// process of a job (the launcher and each worker) must register the same
// templates: call it from an init function. It panics on an empty name,
// a nil t, or a name registered twice (programmer errors).
func Register(name string, t Template) {
	if name == "" || t == nil {
		panic("shard: Register needs a name and a template")
	}
	templates.mu.Lock()
	defer templates.mu.Unlock()
	if templates.m == nil {
		templates.m = map[string]Template{}
	}
	if _, ok := templates.m[name]; ok {
		panic(fmt.Sprintf("shard: template %q registered twice", name))
	}
	templates.m[name] = t
}

// lookup returns the template named name, or an error listing those
// registered.
func lookup(name string) (Template, error) {
	templates.mu.RLock()
	defer templates.mu.RUnlock()
	if t, ok := templates.m[name]; ok {
		return t, nil
	}
	names := make([]string, 0, len(templates.m))
	for n := range templates.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("shard: no template %q registered in this process (registered: %v)", name, names)
}
