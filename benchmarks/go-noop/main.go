// go-noop: a scheduler extender that does no scheduling work, with Go's standard library only.
//
//	go-noop ADDR
//
// It is the floor `make bench` measures kube-extender against: every verb decodes its request
// into the k8s.io/kube-scheduler/extender/v1 shapes with encoding/json and answers with net/http -
// filter keeps every candidate name, prioritize gives each a score of 0, preempt keeps what it
// was offered, bind succeeds - so the figure is what an extender pays for HTTP and JSON alone.
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"
)

type NodeList struct {
	Items []map[string]any `json:"items"`
}

type ExtenderArgs struct {
	Pod       map[string]any
	Nodes     *NodeList
	NodeNames *[]string
}

type ExtenderFilterResult struct {
	Nodes                      *NodeList
	NodeNames                  *[]string
	FailedNodes                map[string]string
	FailedAndUnresolvableNodes map[string]string
	Error                      string
}

type HostPriority struct {
	Host  string
	Score int64
}

type MetaPod struct{ UID string }

type MetaVictims struct {
	Pods             []*MetaPod
	NumPDBViolations int64
}

type ExtenderPreemptionArgs struct {
	Pod                   map[string]any
	NodeNameToMetaVictims map[string]*MetaVictims
}

type ExtenderPreemptionResult struct {
	NodeNameToMetaVictims map[string]*MetaVictims
}

type ExtenderBindingResult struct{ Error string }

// verb answers POSTs to path: decode the body into a fresh In, reply with answer(in).
func verb[In any](path string, answer func(*In) any) {
	http.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		in := new(In)
		if err := json.NewDecoder(r.Body).Decode(in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(answer(in))
	})
}

func names(a *ExtenderArgs) []string {
	if a.NodeNames != nil {
		return *a.NodeNames
	}
	out := []string{}
	if a.Nodes != nil {
		for _, item := range a.Nodes.Items {
			if meta, ok := item["metadata"].(map[string]any); ok {
				if name, ok := meta["name"].(string); ok {
					out = append(out, name)
				}
			}
		}
	}
	return out
}

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: go-noop ADDR (e.g. 127.0.0.1:8889)")
	}
	verb("/scheduler/filter", func(a *ExtenderArgs) any {
		return ExtenderFilterResult{Nodes: a.Nodes, NodeNames: a.NodeNames, FailedNodes: map[string]string{},
			FailedAndUnresolvableNodes: map[string]string{}}
	})
	verb("/scheduler/prioritize", func(a *ExtenderArgs) any {
		out := []HostPriority{}
		for _, name := range names(a) {
			out = append(out, HostPriority{Host: name})
		}
		return out
	})
	verb("/scheduler/preempt", func(a *ExtenderPreemptionArgs) any {
		return ExtenderPreemptionResult{NodeNameToMetaVictims: a.NodeNameToMetaVictims}
	})
	verb("/scheduler/bind", func(_ *map[string]any) any { return ExtenderBindingResult{} })
	log.Fatal(http.ListenAndServe(os.Args[1], nil))
}
